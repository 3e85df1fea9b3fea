"""protocol.decide as a decision table: every row is (what the output holds, what the call asks)
-> the plan, or the error the user sees. Pure: no storage, no processes."""

from __future__ import annotations

import pytest

from shardwright.errors import CorruptStateError, DatasetExistsError, OutputDirError, RunMismatchError
from shardwright.format import ChunkEntry, IndexConfig
from shardwright.protocol.decide import Observed, PlanKind, Request, decide
from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.identity import IdentityTable
from shardwright.protocol.manifest import Manifest, OutputSettings
from shardwright.protocol.recorded import Recorded
from shardwright.protocol.run_record import RunRecord
from shardwright.sources import UnitIdentity

INPUTS = InputsFingerprint.of(list(range(10)))
OTHER_INPUTS = InputsFingerprint.of(list(range(11)))
SETTINGS = OutputSettings(chunk_size=2, chunk_bytes=None, compression=None, num_shards=2)
OTHER_SETTINGS = OutputSettings(chunk_size=3, chunk_bytes=None, compression=None, num_shards=2)
# the same settings with a count of shards from this call's workers (issue 19: the default
# count changed from a fixed 64 to 4 per worker), against runs that recorded 2
OTHER_SHARDS = OutputSettings(chunk_size=2, chunk_bytes=None, compression=None, num_shards=8)
CONFIG = IndexConfig(chunk_bytes=None, chunk_size=2, compression=None, data_format=["int"], data_spec=None)
GEN0 = (ChunkEntry("chunk-0-00000-000000.bin", 2, 24), ChunkEntry("chunk-0-00001-000000.bin", 2, 24))
GEN1 = GEN0 + (ChunkEntry("chunk-1-00000-000000.bin", 2, 24),)


def manifest(*, generation=0, mode="create", inputs=INPUTS, settings=SETTINGS, use_checkpoint=True, fn="m.f"):
    return Manifest(
        run_id="run",
        generation=generation,
        mode=mode,
        num_inputs=inputs.count,
        num_shards=2,
        inputs=inputs.to_json(),
        settings=settings,
        use_checkpoint=use_checkpoint,
        base_chunks=[],
        base_config=None,
        fn_name=fn,
        created_at=0.0,
    )


def finished(*, inputs=INPUTS, settings=SETTINGS, fn="m.f", failed=()):
    data = {
        "inputs": inputs.to_json(),
        "settings": settings.to_json(),
        "fn_name": fn,
        "failed_inputs": [list(p) for p in failed],
    }
    return RunRecord.from_json(data, "run.json")


def request(mode=None, *, inputs=INPUTS, settings=SETTINGS, fn="m.f", use_checkpoint=True, explicit_num_shards=True):
    return Request(
        mode=mode,
        inputs=inputs,
        settings=settings,
        fn_name=fn,
        use_checkpoint=use_checkpoint,
        explicit_num_shards=explicit_num_shards,
    )


def seen(**kw):
    if "index_chunks" in kw:
        kw.setdefault("index_config", CONFIG)
    return Observed(url="out", **kw)


CORRUPT = CorruptStateError("run manifest out/.shardwright/manifest.json is not valid JSON")

TABLE = [
    # (row id, observed, request, expected plan kind or error class)
    ("empty", seen(), request(), PlanKind.FRESH),
    ("empty append", seen(), request("append"), PlanKind.FRESH),
    ("empty overwrite", seen(), request("overwrite"), PlanKind.OVERWRITE),
    ("interrupted, same call", seen(manifest=manifest()), request(), PlanKind.RESUME),
    ("interrupted, same call, append", seen(manifest=manifest()), request("append"), PlanKind.RESUME),
    ("interrupted, other fn", seen(manifest=manifest(fn="m.old")), request(), PlanKind.RESUME),
    ("interrupted, other inputs", seen(manifest=manifest()), request(inputs=OTHER_INPUTS), RunMismatchError),
    ("interrupted, other settings", seen(manifest=manifest()), request(settings=OTHER_SETTINGS), RunMismatchError),
    (
        "interrupted, default shards from other workers: the recorded count wins",
        seen(manifest=manifest()),
        request(settings=OTHER_SHARDS, explicit_num_shards=False),
        PlanKind.RESUME,
    ),
    (
        "interrupted, num_shards passed and different",
        seen(manifest=manifest()),
        request(settings=OTHER_SHARDS),
        RunMismatchError,
    ),
    ("interrupted without checkpoints", seen(manifest=manifest(use_checkpoint=False)), request(), PlanKind.RESTART),
    (
        "interrupted, call without checkpoints",
        seen(manifest=manifest()),
        request(use_checkpoint=False),
        PlanKind.RESTART,
    ),
    ("interrupted, overwrite", seen(manifest=manifest()), request("overwrite"), PlanKind.OVERWRITE),
    (
        "interrupted overwrite, same call",
        seen(manifest=manifest(mode="overwrite")),
        request("overwrite"),
        PlanKind.RESUME,
    ),
    (
        "interrupted overwrite, other inputs",
        seen(manifest=manifest(mode="overwrite")),
        request("overwrite", inputs=OTHER_INPUTS),
        PlanKind.OVERWRITE,
    ),
    (
        "interrupted overwrite, unreadable records",
        seen(manifest=manifest(mode="overwrite"), records_readable=False),
        request("overwrite"),
        PlanKind.OVERWRITE,
    ),
    (
        "published, cleanup cut short",
        seen(manifest=manifest(generation=1), index_chunks=GEN1),
        request(),
        PlanKind.FINISH_PUBLISH,
    ),
    ("dataset of the same call", seen(index_chunks=GEN0, last_run=finished()), request(), PlanKind.NOOP),
    (
        "dataset of the same call, default shards from other workers",
        seen(index_chunks=GEN0, last_run=finished()),
        request(settings=OTHER_SHARDS, explicit_num_shards=False),
        PlanKind.NOOP,
    ),
    (
        "dataset of the same call, append",
        seen(index_chunks=GEN0, last_run=finished()),
        request("append"),
        PlanKind.NOOP,
    ),
    (
        "dataset of the same call with failures",
        seen(index_chunks=GEN0, last_run=finished(failed=[(3, 0)])),
        request(),
        PlanKind.RETRY,
    ),
    (
        "dataset of another call",
        seen(index_chunks=GEN0, last_run=finished(fn="m.other")),
        request(),
        DatasetExistsError,
    ),
    ("dataset without run record", seen(index_chunks=GEN0), request(), DatasetExistsError),
    (
        "dataset, append",
        seen(index_chunks=GEN0, last_run=finished(fn="m.other")),
        request("append", inputs=OTHER_INPUTS),
        PlanKind.APPEND,
    ),
    # the same inputs again (another fn): each would be in the dataset twice (allow_repeated_append)
    (
        "dataset, append of inputs it holds",
        seen(index_chunks=GEN0, last_run=finished(fn="m.other")),
        request("append"),
        DatasetExistsError,
    ),
    ("dataset, overwrite", seen(index_chunks=GEN0, last_run=finished()), request("overwrite"), PlanKind.OVERWRITE),
    ("foreign files", seen(foreign_files=("chunk-0-0.bin",)), request(), OutputDirError),
    ("foreign files, overwrite", seen(foreign_files=("chunk-0-0.bin",)), request("overwrite"), PlanKind.OVERWRITE),
    ("unreadable state", seen(manifest_error=CORRUPT), request(), CorruptStateError),
    ("unreadable state, append", seen(manifest_error=CORRUPT), request("append"), CorruptStateError),
    ("unreadable state, overwrite", seen(manifest_error=CORRUPT), request("overwrite"), PlanKind.OVERWRITE),
]

# --- mode="incremental" (protocol.identity) ----------------------------------------------------

FIRST_TEN = IdentityTable.of_values(list(range(10)))
RECORDED = Recorded([0], [FIRST_TEN], [[[0, 10]]])
MORE = InputsFingerprint.of(list(range(12)))


def incremental(values=tuple(range(12)), *, fn="m.f", inputs=None, table=None):
    values = list(values)
    return Request(
        mode="incremental",
        inputs=inputs or InputsFingerprint.of(values),
        settings=SETTINGS,
        fn_name=fn,
        use_checkpoint=True,
        identities=table or IdentityTable.of_values(values),
        prefix_fingerprint=lambda n: InputsFingerprint.of(values[:n]),
    )


def one_run(*, generation=0, **kw):
    record = finished(**kw)
    return RunRecord.from_json({**record.data, "generation": generation, "mode": "create"}, "run.json")


FILES_V1 = IdentityTable.of_units(
    [UnitIdentity("s3://b/a.parquet", "e1", 0, 5), UnitIdentity("s3://b/b.parquet", "e2", 0, 5)]
)
FILES_V2 = IdentityTable.of_units(
    [UnitIdentity("s3://b/a.parquet", "e1", 0, 5), UnitIdentity("s3://b/b.parquet", "e3", 0, 5)]
)
RECORDED_FILES = Recorded([0], [FILES_V1], [[[0, 10]]])

TABLE += [
    ("empty, incremental", seen(), incremental(), PlanKind.FRESH),
    ("interrupted incremental, same call", seen(manifest=manifest(inputs=MORE)), incremental(), PlanKind.RESUME),
    (
        "recorded dataset, new inputs",
        seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED),
        incremental(),
        PlanKind.INCREMENTAL,
    ),
    (
        "recorded dataset, nothing new",
        seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED),
        incremental(range(10)),
        PlanKind.NOOP,
    ),
    (
        "recorded dataset, a file changed since it was added",
        seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED_FILES),
        incremental(range(10), table=FILES_V2),
        RunMismatchError,
    ),
    (
        "recorded dataset of another fn",
        seen(index_chunks=GEN0, last_run=one_run(fn="m.other"), recorded=RECORDED),
        incremental(),
        RunMismatchError,
    ),
    (
        "unrecorded dataset, its inputs a prefix",
        seen(index_chunks=GEN0, last_run=one_run(), recorded=Recorded([], [], [])),
        incremental(),
        PlanKind.INCREMENTAL,
    ),
    (
        "unrecorded dataset, other inputs",
        seen(index_chunks=GEN0, last_run=one_run(), recorded=Recorded([], [], [])),
        incremental(range(5, 17)),
        DatasetExistsError,
    ),
    ("litdata's dataset (no run record)", seen(index_chunks=GEN0), incremental(), DatasetExistsError),
]


def test_incremental_runs_only_the_new_inputs_counting_repeats_by_occurrence():
    plan = decide(seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED), incremental([*range(12), 3, 3]))
    assert (plan.kind, plan.input_ranges, plan.manifest_mode) == (PlanKind.INCREMENTAL, ((10, 14),), "incremental")
    assert plan.generation == 1 and plan.base is not None and plan.base[0] == GEN0
    assert "10 input(s) already in the dataset are skipped" in plan.note


def test_incremental_retries_inputs_that_failed_and_reports_removed_ones():
    failed_4 = Recorded([0], [FIRST_TEN], [[[0, 4], [5, 10]]])  # input 4 failed (on_error="skip")
    plan = decide(seen(index_chunks=GEN0, last_run=one_run(), recorded=failed_4), incremental(range(2, 12)))
    assert plan.input_ranges == ((2, 3), (8, 10))  # 4 (position 2) and 10, 11
    assert "2 input(s) in the dataset are no longer among the inputs" in plan.note


def test_incremental_over_files_names_the_changed_file_and_the_fix():
    with pytest.raises(RunMismatchError, match=r"changed since they were added.*b\.parquet.*mode='overwrite'"):
        decide(seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED_FILES), incremental(table=FILES_V2))
    grown = IdentityTable.of_units(
        [
            *[UnitIdentity(n, v, 0, 5) for n, v in (("s3://b/a.parquet", "e1"), ("s3://b/b.parquet", "e2"))],
            UnitIdentity("s3://b/c.parquet", "e9", 0, 7),
        ]
    )
    plan = decide(
        seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED_FILES), incremental(range(17), table=grown)
    )
    assert plan.input_ranges == ((10, 17),)


def test_nothing_new_says_so():
    plan = decide(seen(index_chunks=GEN0, last_run=one_run(), recorded=RECORDED), incremental(range(10)))
    assert plan.kind is PlanKind.NOOP and plan.note.startswith("nothing new: all 10 input(s)")


def test_a_superset_rerun_suggests_incremental():
    with pytest.raises(DatasetExistsError, match="mode='incremental' to add only the inputs not in it yet"):
        decide(seen(index_chunks=GEN0, last_run=finished()), request(inputs=MORE))


def test_a_run_that_added_no_chunk_still_gets_its_own_generation():
    plan = decide(
        seen(index_chunks=GEN0, last_run=one_run(fn="m.x", generation=4)), request("append", inputs=OTHER_INPUTS)
    )
    assert plan.generation == 5


@pytest.mark.parametrize("observed,req,expected", [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_decision_table(observed, req, expected):
    if isinstance(expected, PlanKind):
        assert decide(observed, req).kind is expected
    else:
        with pytest.raises(expected):
            decide(observed, req)


def test_table_covers_every_plan_kind():
    assert {row[3] for row in TABLE if isinstance(row[3], PlanKind)} == set(PlanKind)


def test_new_runs_get_a_generation_after_the_dataset():
    plan = decide(seen(index_chunks=GEN1, last_run=finished(fn="m.other")), request("append", inputs=OTHER_INPUTS))
    assert (plan.kind, plan.generation, plan.manifest_mode) == (PlanKind.APPEND, 2, "append")
    assert plan.base is not None and plan.base[0] == GEN1


def test_retry_lists_the_failed_inputs_and_their_committed_outputs():
    plan = decide(seen(index_chunks=GEN0, last_run=finished(failed=[(3, 0), (7, 2)])), request())
    assert (plan.input_ids, plan.input_skips, plan.manifest_mode) == ((3, 7), (0, 2), "retry")


def test_resume_with_another_fn_says_which():
    plan = decide(seen(manifest=manifest(fn="m.old")), request(fn="m.new"))
    assert plan.fn_changed_from == "m.old"


def test_mismatch_names_the_setting_and_the_fix():
    with pytest.raises(RunMismatchError, match=r"chunk_size was 2, now 3; rerun with chunk_size=2"):
        decide(seen(manifest=manifest()), request(settings=OTHER_SETTINGS))


def test_dataset_exists_suggests_append_and_overwrite():
    with pytest.raises(DatasetExistsError, match="append.*overwrite"):
        decide(seen(index_chunks=GEN0), request())


def test_an_input_that_failed_midway_is_retried_skipping_its_outputs_in_the_dataset():
    failed_4 = Recorded([0], [FIRST_TEN], [[[0, 4], [5, 10]]], partials=[[[4, 2]]])  # 4 failed after 2 outputs
    plan = decide(seen(index_chunks=GEN0, last_run=one_run(), recorded=failed_4), incremental(range(2, 12)))
    assert plan.input_ranges == ((2, 3), (8, 10)) and plan.range_skips == ((2, 2),)


def test_the_tail_of_an_unrecorded_dataset_records_its_run_first():
    plan = decide(
        seen(index_chunks=GEN0, last_run=one_run(failed=[(3, 1)]), recorded=Recorded([], [], [])), incremental()
    )
    assert plan.kind is PlanKind.INCREMENTAL and plan.input_ranges == ((10, 12),)
    assert plan.backfill == (0, 10, ((3, 1),))
