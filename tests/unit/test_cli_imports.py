"""The command line starts at once: ``shardwright --help`` and the read-only commands on a local
dataset import no torch, cloud SDK, Ray or pyarrow (issue 36: every command used to import
torch, 7 s under load). Each command runs in a fresh interpreter, which then names the heavy
packages it holds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from shardwright import optimize

HEAVY = ("torch", "boto3", "botocore", "google", "azure", "ray", "pyarrow")

_CHILD = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from shardwright.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(json.loads(sys.argv[1]))
        except SystemExit as exc:  # argparse's --help
            code = exc.code
    heavy = json.loads(sys.argv[2])
    print(json.dumps([code, sorted({m.split(".")[0] for m in sys.modules} & set(heavy))]))
    """
)


def _run(argv: list[str]) -> tuple[int, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(argv), json.dumps(HEAVY)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    code, heavy = json.loads(result.stdout.strip().splitlines()[-1])
    return code, heavy


def _double(i: int) -> dict:
    return {"i": i * 2}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("cli") / "ds"
    optimize(_double, list(range(20)), str(out), chunk_size=5, num_workers=1, verbose=False)
    return str(out)


def test_help_imports_no_heavy_package():
    assert _run(["--help"]) == (0, [])


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["history"], ["runs"]])
def test_read_only_commands_on_a_local_dataset_import_no_heavy_package(dataset, command):
    argv = [*command, dataset] if command[0] != "runs" else ["runs", dataset.rsplit("/", 1)[0]]
    code, heavy = _run(argv)
    assert code == 0
    assert heavy == [], f"`shardwright {' '.join(command)}` imported {heavy}"
