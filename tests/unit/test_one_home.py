"""One home per concept (issue 31 section 4): each call shape or literal below appears in the
one module allowed to hold it, so a second copy cannot grow back beside the first. A grep
over src/shardwright, comments and docstrings included (a copy in a comment drifts too)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "shardwright"

# (what, pattern, the modules allowed to hold it)
HOMES = [
    ("parsing index.json", r"\bparse_index\(", {"format/index.py", "protocol/index.py"}),
    ("reading index.json's bytes", r"read_bytes\(INDEX_(KEY|NAME)\)", {"protocol/index.py"}),
    ("the dead INDEX_NAME alias", r"\bINDEX_NAME\b", set()),
    ("the disk-full errnos", r"errno\.(ENOSPC|EDQUOT)", {"storage/files.py"}),
    ("the lease fields a lease writes itself", r"\bOWN_FIELDS\s*=", {"protocol/lease.py"}),
    ("the Slurm job's environment names in records", r"SLURM_(ARRAY_)?JOB_ID[\"']\)", {"process.py"}),
    ("the Slurm step's process index in records", r"get\([\"']SLURM_PROCID", {"process.py"}),
    ("creating a run manifest", r"(?<![\w.])Manifest\(", {"protocol/manifest.py"}),
    ("a URL without its credentials, for messages", r"\burlunsplit\(", {"secrets.py"}),
    ("parsing storage options given as JSON text", r"json\.loads\((storage_)?options\b", {"storage/options.py"}),
    (
        "the --storage-options JSON mistakes",
        r"--storage-options (is not valid JSON|must be a JSON object)",
        {"storage/options.py"},
    ),
    ("a Ray claim's task index, under its typed name", r"[\"']ray_task[\"']", {"protocol/lease.py", "cluster/ray.py"}),
]


def _holders(pattern: str) -> set[str]:
    found = re.compile(pattern)
    return {
        path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py") if found.search(path.read_text(encoding="utf-8"))
    }


@pytest.mark.parametrize(("what", "pattern", "homes"), HOMES, ids=[h[0] for h in HOMES])
def test_each_concept_has_one_home(what, pattern, homes):
    strays = sorted(_holders(pattern) - homes)
    assert strays == [], f"{what} belongs in {sorted(homes) or 'no module'}, found also in {strays}"


def test_a_ray_claim_never_writes_the_lease_s_own_task_key():
    """A claim's "task" key overwrote the scheduler task the lease writes (task_identity())."""
    ray = (SRC / "cluster" / "ray.py").read_text(encoding="utf-8")
    assert not re.search(r"[\"']task[\"']\s*:", ray)


def test_one_redaction_wrapper():
    """Entry points wrap with secrets.redacting; the reader's loops call secrets.without_secrets."""
    assert _holders(r"(?m)^\s*def (redacting|redacted_call|_redacted)\b") == {"secrets.py"}
