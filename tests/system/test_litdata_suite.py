"""litdata's own tests, switched to shardwright's names, as a litdata user switching would.

litdata's tests are copied into a temporary folder with every public litdata name taken from
shardwright and every internal left as litdata's (litdata_suite/switch.py). The tests that reach
only public names shardwright has are run in one pytest subprocess; every outcome must be the
one listed in litdata_suite/suite_expected.py: "passed", or the reason of a documented difference
(docs/litdata-compat.md, "litdata's own tests"). A test that starts passing, or fails for an
unlisted reason, fails this test.

litdata's tests at tag v0.2.71 are read at test time from a litdata checkout's tests/ folder
named by SHARDWRIGHT_LITDATA_TESTS, checked against the digest of that tag's tests. None of
litdata's code is kept in this repository (an earlier vendored copy of v0.2.45's tests was
removed): litdata's sdist carries no tests, so without the variable the test is skipped.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("litdata")
pytest.importorskip("torch")

HERE = Path(__file__).parent / "litdata_suite"
sys.path.insert(0, str(HERE))
import switch  # noqa: E402
from suite_expected import ANY, EXPECTED_V0_2_71, SIGN  # noqa: E402

TESTS_ENV = "SHARDWRIGHT_LITDATA_TESTS"
# sha256 over (path, bytes) of every *.py under tests/ at litdata's tag v0.2.71 (a847d57e)
V0_2_71_DIGEST = "d53e0eda68a122d3841665dbe4d5645802509c2231dc832bc0847cb163146d6a"


def _outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed / failed / skipped, failure message)."""
    out = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").replace(".", "/").removeprefix("tests/") + ".py::" + case.get("name", "")
        tags = {child.tag for child in case}
        message = " ".join(c.get("message") or "" for c in case if c.tag in ("failure", "error"))
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        out[name] = (outcome, message)
    return out


def _tree_digest(tests: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests).as_posix()
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _run_switched(src: Path, tmp_path: Path, expected: dict[str, str], counts: tuple[int, int]) -> None:
    classes = switch.switch_tree(src, tmp_path / "tests")
    public = sorted(test for test, kind in classes.items() if kind == "public")
    # every test is classified; the public ones are the ones run (internal ones counted)
    assert (len(classes), len(public)) == counts
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "90",
            f"--junitxml={report}",
            *(f"tests/{t}" for t in public),
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=600,
        check=False,
    )
    got = _outcomes(report)
    unexpected = {}
    for test, (outcome, message) in got.items():
        want = _expected(expected, test)
        if want.startswith(ANY):
            continue
        wanted = want if want in ("passed", "skipped") else "failed"
        signs = SIGN.get(want, ("",))
        if outcome != wanted or not any(sign in message for sign in signs):
            unexpected[test] = (outcome, message[:200], want)
    assert not unexpected, unexpected
    missing = [name for name in expected if not any(t == name or t.startswith(name + "[") for t in got)]
    assert not missing, missing
    passed = sum(outcome == "passed" for outcome, _ in got.values())
    assert passed == sum(_expected(expected, t) == "passed" for t in got)


def _expected(expected: dict[str, str], test: str) -> str:
    """The listed outcome of a test id; a name listed without parameters covers all of them."""
    return expected.get(test) or expected.get(test.split("[")[0], "passed")


def test_litdata_v0_2_71_suite_switched(tmp_path: Path) -> None:
    """litdata v0.2.71's tests, from the checkout SHARDWRIGHT_LITDATA_TESTS names: 681 tests, 76
    reach only public names (128 runs with their parameters)."""
    given = os.environ.get(TESTS_ENV)
    if not given:
        pytest.skip(
            f"{TESTS_ENV} is not set: point it at litdata's tests/ folder at tag v0.2.71 "
            "(git clone --depth 1 --branch v0.2.71 https://github.com/Lightning-AI/litData)"
        )
    tests = Path(given)
    assert (tests / "conftest.py").is_file(), f"{TESTS_ENV}={given} holds no conftest.py: name litdata's tests/ folder"
    digest = _tree_digest(tests)
    assert digest == V0_2_71_DIGEST, f"{TESTS_ENV}={given} is not litdata v0.2.71's tests/ (digest {digest[:12]})"
    _run_switched(tests, tmp_path, EXPECTED_V0_2_71, (681, 76))
