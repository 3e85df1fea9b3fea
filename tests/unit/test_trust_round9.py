"""Trust round 9 (docs/trust-round9.md): a record file of a run started by a version that
seals every record (protocol 7) is refused when its checksum field was deleted. Before, an
edit that removed the field left a file shaped like an older version's, which was still
read: "next_input":6 changed to 8, checksum removed, published the dataset without inputs
6 and 7."""

from __future__ import annotations

import pytest

from shardwright.errors import CorruptStateError
from shardwright.protocol.layout import PROTOCOL_VERSION
from shardwright.protocol.records import load_progress
from support.sealed_records import strip_checksum, written_records


def test_a_manifest_written_now_says_its_records_are_sealed():
    from tests.unit.test_claims import _manifest  # a Manifest as this version writes it

    from shardwright.protocol.manifest import Manifest

    assert Manifest.from_json(_manifest(PROTOCOL_VERSION), "m").records_sealed
    assert not Manifest.from_json(_manifest(6), "m").records_sealed, "a protocol-6 run may hold unsealed files"


def test_a_record_edited_and_stripped_of_its_checksum_is_refused_in_a_sealed_run(tmp_path):
    storage, key = written_records(tmp_path)
    strip_checksum(storage, key, '"next_input":6', '"next_input":8')
    with pytest.raises(CorruptStateError, match="has no checksum, though this run writes every record with one"):
        load_progress(storage, {0: (0, 12)}, "run", sealed=True)
    with pytest.raises(CorruptStateError, match="has no checksum") as raised:
        load_progress(storage, {0: (0, 12)}, "run", repair=True, sealed=True)
    # the line to paste names this output, not a placeholder (row 5)
    assert f"`shardwright clean {storage.url}`" in str(raised.value) and "OUTPUT_DIR" not in str(raised.value)


def test_a_run_started_before_checksums_still_reads_its_unsealed_records(tmp_path):
    storage, key = written_records(tmp_path)
    strip_checksum(storage, key)
    assert load_progress(storage, {0: (0, 12)}, "run", sealed=False)[0].next_input == 6


def test_verify_of_a_run_with_a_damaged_record_names_the_file_and_the_fix(tmp_path):
    """Round 8, row 43: verify said "rerun the same optimize call to finish it", and only that
    rerun named the damage. Now one line names the damaged record file and the fix."""
    from shardwright.errors import IncompleteDatasetError
    from shardwright.reader.verify import verify

    storage, key = written_records(tmp_path)
    text = storage.read_bytes(key).decode().replace('"next_input":6', '"next_input":8')
    storage.write_bytes(key, text.encode())
    with pytest.raises(IncompleteDatasetError) as raised:
        verify(str(tmp_path / "out"))
    message = str(raised.value)
    assert "\n" not in message
    assert key in message and "does not match its checksum" in message
    assert f"`shardwright clean {storage.url}`" in message and "rerun the same optimize call" not in message


# --- the /dev/shm rate budget: a file renamed away or over under a holder (round 7's 22-24) ---

_BUDGET_SCRIPT = """
import os, sys
from shardwright.engine.limits import SharedBudget
path, case = sys.argv[1], sys.argv[2]
first = SharedBudget("2/s", path=path)
first.reserve()
if case == "renamed_away":  # mv budget budget.bak: the holder's file lives on under another name
    os.rename(path, path + ".bak")
else:  # a fresh budget file renamed over the path
    with open(path + ".new", "wb") as f:
        f.write(bytes(64))
    os.chmod(path + ".new", 0o600)
    os.rename(path + ".new", path)
again = first.reserve()  # the holder's next call
second = SharedBudget("2/s", path=path)  # a process that starts after it
print(round(again, 2), round(second.reserve(), 2))
"""


@pytest.mark.parametrize("case", ["renamed_away", "renamed_over"])
def test_a_budget_file_renamed_under_a_holder_stays_one_budget(tmp_path, case):
    """Renamed away, the holder kept its file (still linked under the new name) while new
    processes made another at the path: two budgets, each at the full rate (the second
    call went at once). Now the holder takes the file at the path, as after a deletion."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _BUDGET_SCRIPT, str(tmp_path / "budget"), case],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = map(float, done.stdout.split())
    assert first == 0.0 and second == 0.5, done.stdout  # one budget: the second call waits its turn
