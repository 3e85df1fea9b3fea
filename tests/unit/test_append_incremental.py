"""Issue 33 POOR "Append and incremental": an append of inputs the dataset holds (a superset
or a permutation of earlier inputs) is refused pointing to mode="incremental"; the same data
moved from a list to a source is said to match nothing; switching hash_contents is
explained; a settings mismatch names the setting the call passed. Pure decide tables."""

from __future__ import annotations

import pytest

from shardwright.errors import DatasetExistsError, RunMismatchError
from shardwright.format import ChunkEntry, IndexConfig
from shardwright.protocol.decide import Observed, PlanKind, Request, decide
from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.identity import IdentityTable
from shardwright.protocol.manifest import OutputSettings
from shardwright.protocol.recorded import Recorded
from shardwright.protocol.run_record import RunRecord
from shardwright.sources import UnitIdentity
from support.manifests import recorded_manifest

SETTINGS = OutputSettings(chunk_size=2, chunk_bytes=None, compression=None, num_shards=2)
BYTES = OutputSettings(chunk_size=None, chunk_bytes=65536, compression=None, num_shards=2)
CONFIG = IndexConfig(chunk_bytes=None, chunk_size=2, compression=None, data_format=["int"], data_spec=None)
GEN0 = (ChunkEntry("chunk-0-00000-000000.bin", 2, 24),)
TEN = list(range(10))


def finished(values, settings=SETTINGS) -> RunRecord:
    data = {
        "inputs": InputsFingerprint.of(values).to_json(),
        "settings": settings.to_json(),
        "fn_name": "m.f",
        "failed_inputs": [],
        "generation": 0,
        "mode": "create",
    }
    return RunRecord.from_json(data, "run.json")


def seen(recorded: Recorded, last=TEN, settings=SETTINGS) -> Observed:
    return Observed(
        url="out", index_chunks=GEN0, index_config=CONFIG, last_run=finished(last, settings), recorded=recorded
    )


def request(mode, values=None, *, table=None, settings=SETTINGS, allow=False) -> Request:
    values = list(values) if values is not None else [f"row{i}" for i in range(table.count)]
    return Request(
        mode=mode,
        inputs=InputsFingerprint.of(values),
        settings=settings,
        fn_name="m.f",
        use_checkpoint=True,
        identities=table if table is not None else IdentityTable.of_values(values),
        prefix_fingerprint=lambda n: InputsFingerprint.of(values[:n]),
        allow_repeated_append=allow,
    )


RECORDED = Recorded([0], [IdentityTable.of_values(TEN)], [[[0, 10]]])


@pytest.mark.parametrize(
    "values", [list(range(15)), list(reversed(TEN)), [3, 11, 12]], ids=["superset", "perm", "some"]
)
def test_appending_inputs_the_dataset_holds_is_refused_naming_the_overlap(values):
    with pytest.raises(DatasetExistsError) as info:
        decide(seen(RECORDED), request("append", values))
    text = str(info.value)
    held = len(set(values) & set(TEN))
    assert f"{held:,} of these {len(values):,} inputs are already in out" in text
    assert f"mode='incremental' to add only the {len(values) - held:,} new one(s)" in text
    assert "allow_repeated_append=True" in text


def test_an_append_of_new_inputs_or_a_repeat_on_purpose_goes_ahead():
    assert decide(seen(RECORDED), request("append", range(10, 20))).kind is PlanKind.APPEND
    assert decide(seen(RECORDED), request("append", range(15), allow=True)).kind is PlanKind.APPEND
    plan = decide(seen(RECORDED), request("incremental", range(15)))
    assert plan.kind is PlanKind.INCREMENTAL and plan.input_ranges == ((10, 15),)


def test_the_same_data_moved_from_a_list_to_a_source_is_said_to_match_nothing():
    table = IdentityTable.of_units([UnitIdentity("/data/rows.jsonl", "10:123", 0, 10)])
    with pytest.raises(RunMismatchError, match=r"recorded as values, these are rows of a source.*mode='append'"):
        decide(seen(RECORDED), request("incremental", table=table))


def test_switching_hash_contents_on_is_explained():
    old = IdentityTable.of_units([UnitIdentity(f"/d/{n}.txt", "1:5", 0, 1) for n in "ab"])
    new = IdentityTable.of_units([UnitIdentity(f"/d/{n}.txt", "1:5:0123456789abcdef", 0, 1) for n in "ab"])
    recorded = Recorded([0], [old], [[[0, 2]]])
    with pytest.raises(RunMismatchError, match=r"hash_contents"):
        decide(seen(recorded, last=["r0", "r1"]), request("incremental", table=new))
    grown = IdentityTable.of_units([UnitIdentity(f"/d/{n}.txt", "1:5:0123456789abcdef", 0, 1) for n in "abc"])
    with pytest.raises(RunMismatchError, match=r"hash_contents"):  # and a new file besides
        decide(seen(recorded, last=["r0", "r1"]), request("incremental", table=grown))


def test_an_incremental_settings_mismatch_names_the_setting_passed():
    with pytest.raises(RunMismatchError) as info:
        decide(seen(RECORDED, settings=BYTES), request("incremental", range(12)))
    text = str(info.value)
    assert text.startswith("out was written with chunk_size=None, chunk_bytes=65536, this call has chunk_size=2")
    assert "rerun with chunk_size=None, chunk_bytes=65536" in text


def test_a_resume_settings_mismatch_names_every_setting_that_differs():
    manifest = recorded_manifest(TEN, settings=BYTES)
    with pytest.raises(RunMismatchError) as info:
        decide(Observed(url="out", manifest=manifest), request(None, TEN))
    text = str(info.value)
    assert "chunk_size was None, now 2 (and chunk_bytes was 65536, now None)" in text
    assert "rerun with chunk_size=None, chunk_bytes=65536 to resume" in text
