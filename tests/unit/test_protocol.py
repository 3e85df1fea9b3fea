"""The commit protocol against the in-memory backend: every step's crash point, in
milliseconds, with simulated power cuts (MemoryStorage.crash drops writes no barrier covered)
and injected storage faults. The same protocol runs on local disk and S3 in test_crash.py and
test_s3.py with real processes and real signals."""

from __future__ import annotations

import dataclasses
import itertools
import uuid

import pytest

from shardwright.errors import CorruptStateError, StorageError
from shardwright.format import ItemEncoder, parse_index
from shardwright.protocol.claim import claim_format
from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round, seal_round, write_chunks
from shardwright.protocol.decide import PlanKind, Request, decide
from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.layout import (
    FORMAT_KEY,
    INDEX_KEY,
    MANIFEST_KEY,
    SHARDS_PREFIX,
    STATE_DIR,
    parse_record_key,
    record_key,
    selection_key,
)
from shardwright.protocol.manifest import Manifest, OutputSettings, create_manifest, read_manifest
from shardwright.protocol.observe import observe
from shardwright.protocol.publish import finish_published, publish_if_complete
from shardwright.protocol.recorded import skipped_by_selection
from shardwright.protocol.records import (
    CommitRecord,
    ShardProgress,
    load_progress,
    trusted_progress,
    write_records,
)
from shardwright.protocol.run_record import read_run_record
from shardwright.protocol.status import read_status
from shardwright.storage import MemoryStorage, open_storage

N = 12  # inputs 0..11, two shards of 6, chunks of 2 items
SETTINGS = OutputSettings(chunk_size=2, chunk_bytes=None, compression=None, num_shards=2)
ENCODER = ItemEncoder()
ITEM = {i: ENCODER.encode({"i": i}, i) for i in range(N)}


@pytest.fixture
def storage():
    name = f"proto-{uuid.uuid4().hex[:8]}"
    yield open_storage(f"memory://{name}")
    MemoryStorage.drop(name)


def new_run(storage) -> Manifest:
    inputs = InputsFingerprint.of(list(range(N)))
    manifest = create_manifest(
        storage,
        Manifest(
            run_id=uuid.uuid4().hex,
            generation=0,
            mode="create",
            num_inputs=N,
            num_shards=2,
            inputs=inputs.to_json(),
            settings=SETTINGS,
            use_checkpoint=True,
            base_chunks=[],
            base_config=None,
            fn_name="m.f",
            created_at=0.0,
        ),
    )
    claim_format(storage, manifest.run_id, ENCODER.data_format, ENCODER.data_spec, 0)
    return manifest


def chunk_job(manifest: Manifest, shard: int, seq: int) -> PendingChunk:
    start = manifest.shard_bounds()[shard][0]
    first = start + 2 * seq
    end = manifest.shard_bounds()[shard][1]
    return PendingChunk(shard, seq, [ITEM[first], ITEM[first + 1]], first, first + 2, 0, first + 2 == end)


def round_settings(manifest: Manifest) -> RoundSettings:
    return RoundSettings(manifest.run_id, manifest.generation, None, True)


def committed(storage, manifest) -> dict[int, int]:
    """Inputs done per shard, as a resume would see them."""
    return {s: p.inputs_done for s, p in load_progress(storage, manifest.shard_bounds(), manifest.run_id).items()}


def test_a_round_without_its_closing_barrier_is_lost_on_a_power_cut(storage):
    manifest = new_run(storage)
    commit_round(storage, [chunk_job(manifest, 0, 0), chunk_job(manifest, 1, 0)], round_settings(manifest))
    lost = storage.crash()
    assert any(k.startswith(SHARDS_PREFIX) for k in lost), lost  # the records were never made durable
    assert committed(storage, manifest) == {0: 0, 1: 0}  # nothing committed: the rerun redoes both chunks


def test_the_next_rounds_barrier_makes_the_previous_records_durable(storage):
    manifest = new_run(storage)
    settings = round_settings(manifest)
    commit_round(storage, [chunk_job(manifest, 0, 0)], settings)
    commit_round(storage, [chunk_job(manifest, 0, 1)], settings)  # its barrier covers round 1's record
    storage.crash()
    assert committed(storage, manifest) == {0: 2, 1: 0}
    # every record that survived names a chunk that survived
    present = set(storage.list(""))
    for progress in load_progress(storage, manifest.shard_bounds(), manifest.run_id).values():
        assert all(c.filename in present for c in progress.chunks)


def test_a_failed_chunk_write_commits_nothing_of_its_round(storage):
    manifest = new_run(storage)
    storage.fail_next("write_bytes", StorageError("injected: disk full"))
    with pytest.raises(StorageError, match="injected"):
        commit_round(storage, [chunk_job(manifest, 0, 0), chunk_job(manifest, 1, 0)], round_settings(manifest))
    storage.barrier()
    assert committed(storage, manifest) == {0: 0, 1: 0}


def test_a_record_write_whose_reply_is_lost_still_commits_once(storage):
    """The record write took effect but the caller saw an error (a lost reply): the chunk is
    committed exactly once, and a resume starts after it."""
    manifest = new_run(storage)

    def lose_the_reply_of_record_writes(op, key):
        if op == "write_bytes" and key is not None and key.startswith(SHARDS_PREFIX):
            storage.fail_next("write_bytes", StorageError("injected: reply lost"), after=True)
        return None

    storage.fail_when(lose_the_reply_of_record_writes)
    with pytest.raises(StorageError, match="reply lost"):
        commit_round(storage, [chunk_job(manifest, 0, 0)], round_settings(manifest))
    storage.clear_faults()
    storage.barrier()
    assert committed(storage, manifest) == {0: 2, 1: 0}


def finish_every_shard(storage, manifest) -> None:
    settings = round_settings(manifest)
    jobs = [chunk_job(manifest, shard, seq) for shard, seq in itertools.product(range(2), range(3))]
    commit_round(storage, jobs, settings)
    storage.barrier()


def test_publish_names_every_chunk_once_in_shard_order_then_cleans_up(storage):
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    published, missing = publish_if_complete(storage, manifest, {})
    assert (published, missing) == (True, [])
    chunks, _ = parse_index(storage.read_bytes(INDEX_KEY), "index.json")
    assert [c.filename for c in chunks] == sorted(c.filename for c in chunks)
    assert sum(c.chunk_size for c in chunks) == N
    left = [k for k in storage.list(STATE_DIR + "/") if not k.endswith("run.json")]
    assert left == [".shardwright/inputs/00000000.json"]  # what the dataset holds (protocol.identity)
    assert read_status(storage).state == "complete"


def test_unfinished_shards_are_named_and_nothing_is_published(storage):
    manifest = new_run(storage)
    commit_round(storage, [chunk_job(manifest, 0, s) for s in range(3)], round_settings(manifest))
    storage.barrier()
    assert publish_if_complete(storage, manifest, {}) == (False, [1])
    assert not storage.exists(INDEX_KEY)


def test_a_crash_between_index_and_cleanup_is_finished_by_the_next_call(storage):
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    storage.fail_when(
        lambda op, key: (
            StorageError("injected: run.json write")
            if op == "write_bytes" and key is not None and key.endswith("run.json")
            else None
        )
    )
    with pytest.raises(StorageError):
        publish_if_complete(storage, manifest, {})
    storage.clear_faults()
    assert storage.exists(INDEX_KEY) and storage.exists(MANIFEST_KEY)  # published, not cleaned up
    request = Request(
        mode=None, inputs=InputsFingerprint.of(list(range(N))), settings=SETTINGS, fn_name="m.f", use_checkpoint=True
    )
    assert decide(observe(storage), request).kind is PlanKind.FINISH_PUBLISH


def publish_cut_before_run_json(storage, manifest) -> None:
    """Publish, cut off by a power cut at run.json's write: index.json is out, run.json is not."""
    storage.fail_when(
        lambda op, key: (
            StorageError("injected: power cut") if op == "write_bytes" and key and key.endswith("run.json") else None
        )
    )
    with pytest.raises(StorageError):
        publish_if_complete(storage, manifest, {})
    storage.clear_faults()


# (input id, outputs committed) skipped in each round: shard 0 skips input 1 in its first round;
# shard 1 skips input 8 in its second and input 10, after one output, in its last
SKIPPED = {(0, 0): ((1, 0),), (1, 1): ((8, 0),), (1, 2): ((10, 1),)}


@pytest.mark.parametrize("power_cut", [False, True])
def test_run_json_lists_every_skipped_input_even_when_a_power_cut_took_the_last_records(storage, power_cut):
    """A worker leaves its last round's records to the page cache (engine.committer): a power
    cut after index.json can take them, and the next call, finishing the publication, then
    reads the skipped inputs from the selection written before index.json."""
    manifest = new_run(storage)
    settings = round_settings(manifest)
    for seq in range(3):  # round by round, a barrier after each but the last (as the committer)
        jobs = [
            dataclasses.replace(chunk_job(manifest, shard, seq), failed=SKIPPED.get((shard, seq), ()))
            for shard in range(2)
        ]
        commit_round(storage, jobs, settings)
        if seq < 2:
            storage.barrier()
    publish_cut_before_run_json(storage, manifest)
    if power_cut:  # the last round's record files, lost
        for key in storage.list(SHARDS_PREFIX):
            if parse_record_key(key)[1] == 2:
                storage.delete(key)
        assert not all(p.done for p in load_progress(storage, manifest.shard_bounds(), manifest.run_id).values())
    chunks, _ = parse_index(storage.read_bytes(INDEX_KEY), "index.json")
    finish_published(storage, manifest, chunks)
    record = read_run_record(storage)
    assert record is not None and [list(p) for p in record.failed_inputs] == [[1, 0], [8, 0], [10, 1]]
    assert not storage.exists(MANIFEST_KEY)


def test_a_power_cut_that_took_the_last_records_and_a_deleted_selection_is_named(storage):
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    publish_cut_before_run_json(storage, manifest)
    storage.delete(max(storage.list(SHARDS_PREFIX)))  # a shard's last record, lost
    storage.delete(selection_key(manifest.generation))  # deleted by hand
    chunks, _ = parse_index(storage.read_bytes(INDEX_KEY), "index.json")
    with pytest.raises(CorruptStateError, match="input selection and some of its checkpoint records are gone"):
        finish_published(storage, manifest, chunks)


@pytest.mark.parametrize(
    "ran, selected, partial, expected",
    [
        ({"num_inputs": 6}, [[0, 6]], [], []),
        ({"num_inputs": 6}, [[0, 2], [3, 5]], [[5, 2]], [[2, 0], [5, 2]]),
        ({"num_inputs": 6}, [], [], [[p, 0] for p in range(6)]),
        ({"num_inputs": 12, "input_ranges": [[2, 4], [8, 12]]}, [[3, 4], [8, 9], [10, 12]], [[9, 3]], [[2, 0], [9, 3]]),
        ({"num_inputs": 4, "input_ids": [7, 3, 5, 4]}, [[4, 6]], [], [[3, 0], [7, 0]]),
    ],
)
def test_the_skipped_inputs_of_a_selection(storage, ran, selected, partial, expected):
    manifest = dataclasses.replace(new_run(storage), **ran)
    assert skipped_by_selection(manifest, selected, partial) == expected


def test_a_record_that_names_a_deleted_chunk_refuses_to_publish(storage):
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    storage.delete(next(k for k in storage.list("chunk-")))
    with pytest.raises(CorruptStateError, match="missing"):
        publish_if_complete(storage, manifest, {})
    assert not storage.exists(INDEX_KEY)


def test_a_chunk_changed_by_hand_refuses_to_publish(storage):
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    victim = storage.list("chunk-")[0]
    storage.write_bytes(victim, storage.read_bytes(victim) + b"x")
    with pytest.raises(CorruptStateError, match=f"{victim}.* holds .* bytes, its record says"):
        publish_if_complete(storage, manifest, {})
    assert not storage.exists(INDEX_KEY)


def test_publish_checks_every_chunk_with_one_listing_not_a_request_per_chunk(storage):
    """On an object store each size() is a request: the chunks' sizes come from the listing
    (issue 36 counted one HEAD per chunk at the end of every run)."""
    manifest = new_run(storage)
    finish_every_shard(storage, manifest)
    asked: list[tuple[str, str | None]] = []
    storage.fail_when(lambda op, key: asked.append((op, key)))  # records every call, fails none
    assert publish_if_complete(storage, manifest, {}) == (True, [])
    assert [call for call in asked if call[0] in ("size", "exists") and str(call[1]).startswith("chunk-")] == []
    assert [call for call in asked if call[0] in ("list", "list_info") and call[1] == "chunk-"] != []


def test_the_manifest_is_created_once_whoever_races(storage):
    winners = {new_run(storage).run_id for _ in range(5)}
    assert len(winners) == 1 and read_manifest(storage).run_id in winners
    assert storage.exists(FORMAT_KEY)


# -- publish takes what our workers reported when one listing proves it is what storage holds
# (records.trusted_progress, step 4 of the package docstring); anything else is read back


def our_workers_commit(storage, manifest, shards=(0, 1), log=None) -> dict[int, ShardProgress]:
    """Every chunk of ``shards``, one round (one record file) per chunk, and what the engine's
    tracker knows afterwards: each record with the key of the file its worker wrote it into."""
    known = {s: ShardProgress(s, *b) for s, b in manifest.shard_bounds().items()}
    for seq in range(3):
        jobs = [chunk_job(manifest, s, seq) for s in shards]
        records = write_chunks(storage, jobs, round_settings(manifest))
        for record, key in zip(records, seal_round(storage, jobs, records, round_settings(manifest), log)):
            known[record.shard].add(record, key)
    storage.barrier()
    return known


def record_reads(asked) -> list:
    return [
        c
        for c in asked
        if c[0] not in ("write_bytes", "delete", "delete_prefix", "list", "list_info")
        and str(c[1]).startswith(SHARDS_PREFIX)
    ]


def published_items(storage) -> int:
    chunks, _ = parse_index(storage.read_bytes(INDEX_KEY), "index.json")
    return sum(c.chunk_size for c in chunks)


def test_publish_reads_back_no_record_when_the_listing_shows_exactly_those_our_workers_wrote(storage):
    manifest = new_run(storage)
    known = our_workers_commit(storage, manifest)
    assert all(len(p.written) == 3 for p in known.values())
    taken, trusted = trusted_progress(storage, manifest.shard_bounds(), known, manifest.run_id)
    assert trusted == [0, 1] and taken == load_progress(storage, manifest.shard_bounds(), manifest.run_id)
    asked: list[tuple[str, str | None]] = []
    storage.fail_when(lambda op, key: asked.append((op, key)))
    assert publish_if_complete(storage, manifest, known) == (True, [])
    assert record_reads(asked) == []
    assert published_items(storage) == N


def thiefs_record(manifest, shard: int, seq: int, prev_epoch: int | None, epoch: int) -> CommitRecord:
    """A record of another writer of ``shard`` (a takeover: a higher epoch) saying the shard is
    done with no more chunks."""
    start, end = manifest.shard_bounds()[shard]
    return CommitRecord(shard, seq, None, 0, start, end, 0, True, (), manifest.run_id, epoch, prev_epoch)


@pytest.mark.parametrize("ours_removed", [False, True])
def test_a_record_of_another_epoch_beside_or_instead_of_ours_is_read_and_wins(storage, ours_removed):
    """A thief that took shard 1 over wrote its own record 0 (done): storage's chain is the
    thief's, and publish must see it, whatever our workers reported (without the fallback the
    dataset would hold shard 1's chunks: 12 items instead of 6)."""
    manifest = new_run(storage)
    known = our_workers_commit(storage, manifest)
    ours = known[1].records[0].epoch
    if ours_removed:
        for key in known[1].written:
            storage.delete(key)
    write_records(storage, [thiefs_record(manifest, 1, 0, None, ours + 1000)])
    asked: list[tuple[str, str | None]] = []
    storage.fail_when(lambda op, key: asked.append((op, key)))
    assert publish_if_complete(storage, manifest, known) == (True, [])
    assert published_items(storage) == N // 2  # shard 0's chunks only: the thief's chain has none
    assert {str(c[1])[len(SHARDS_PREFIX) :][:5] for c in record_reads(asked)} == {"00001"}  # shard 0 not read


def test_a_thiefs_record_after_ours_that_ends_the_chain_is_read(storage):
    """The thief resumed shard 1 after our record 0 and finished it with its own record 1:
    our records 1 and 2 are off the chain (a fenced writer's), so shard 1 holds one chunk."""
    manifest = new_run(storage)
    known = our_workers_commit(storage, manifest)
    ours = known[1].records[0].epoch
    write_records(storage, [thiefs_record(manifest, 1, 1, ours, ours + 1000)])
    assert publish_if_complete(storage, manifest, known) == (True, [])
    assert published_items(storage) == N // 2 + 2


def test_one_of_our_record_files_gone_is_read_and_leaves_the_shard_unfinished(storage):
    manifest = new_run(storage)
    known = our_workers_commit(storage, manifest)
    storage.delete(sorted(known[1].written)[1])  # record 1 of shard 1: its chain stops at record 0
    assert publish_if_complete(storage, manifest, known) == (False, [1])
    assert not storage.exists(INDEX_KEY)


def test_progress_read_from_storage_is_never_taken_on_trust(storage):
    """A record that did not come with its file's key (read back, a resume) makes the shard's
    files unknown for good: publish reads them."""
    manifest = new_run(storage)
    our_workers_commit(storage, manifest)
    read = load_progress(storage, manifest.shard_bounds(), manifest.run_id)
    assert all(p.written is None for p in read.values())
    resumed = ShardProgress(1, *manifest.shard_bounds()[1])
    resumed.add(read[1].records[0])  # read at the claim
    for record in read[1].records[1:]:
        resumed.add(record, record_key(record.shard, record.seq, record.epoch))  # then our workers
    assert resumed.written is None
    _, trusted = trusted_progress(storage, manifest.shard_bounds(), {**read, 1: resumed}, manifest.run_id)
    assert trusted == []


def test_each_record_is_reported_with_the_key_of_the_file_it_was_written_into(storage):
    manifest = new_run(storage)
    jobs = [chunk_job(manifest, 0, 0), chunk_job(manifest, 0, 1), chunk_job(manifest, 1, 0), chunk_job(manifest, 0, 2)]
    records = write_chunks(storage, jobs, round_settings(manifest))
    keys = seal_round(storage, jobs, records, round_settings(manifest))
    assert keys[0] == keys[1] != keys[2] != keys[3] != keys[0]
    assert set(keys) == {k for k in storage.list(SHARDS_PREFIX)}
