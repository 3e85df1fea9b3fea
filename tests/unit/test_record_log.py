"""A worker's record log (protocol.record_log, issue 36): its rounds' record files appended to
one file on local disk, read back as the same chain, torn only at its end, refused when damaged,
and never written through a link or into a FIFO."""

from __future__ import annotations

import os

import pytest

from shardwright.errors import CorruptStateError
from shardwright.protocol import record_log
from shardwright.protocol.layout import SHARDS_PREFIX, is_record_log_key, is_state_key, record_log_key
from shardwright.protocol.publish import discard_run_state
from shardwright.protocol.records import (
    CommitRecord,
    ShardProgress,
    count_committed_chunks,
    load_progress,
    trusted_progress,
    write_records,
)
from shardwright.storage import LocalStorage

BOUNDS = {0: (0, 6), 1: (6, 12)}


def rec(shard: int, seq: int, epoch: int, prev: int | None, run: str = "run") -> CommitRecord:
    start = BOUNDS[shard][0]
    return CommitRecord(shard, seq, None, 0, start + 2 * seq, start + 2 * seq + 2, 0, seq == 2, (), run, epoch, prev)


def chain(epoch: int = 5, run: str = "run") -> list[list[CommitRecord]]:
    """Three rounds, each with one record of shard 0 and one of shard 1."""
    return [[rec(s, seq, epoch, None if seq == 0 else epoch, run) for s in (0, 1)] for seq in range(3)]


def logged(tmp_path, rounds=None, log=None) -> tuple[LocalStorage, record_log.RecordLog, list[str]]:
    storage = LocalStorage(tmp_path / "out")
    log = log or record_log.RecordLog(storage)
    keys = [key for records in rounds or chain() for key in write_records(storage, records, log)]
    storage.barrier()
    return storage, log, keys


def inputs_done(storage, **kwargs) -> dict[int, int]:
    return {s: p.inputs_done for s, p in load_progress(storage, BOUNDS, "run", **kwargs).items()}


def lines_of(storage, key) -> list[bytes]:
    return storage.read_bytes(key).split(b"\n")


def test_a_writers_rounds_go_to_one_log_and_read_back_as_the_record_files_would(tmp_path):
    storage, log, keys = logged(tmp_path)
    assert storage.list(SHARDS_PREFIX) == [log.key] and set(keys) == {log.key} and is_record_log_key(log.key)
    assert len(lines_of(storage, log.key)) == 7  # 6 files (one per shard and round), each ending a line
    files = LocalStorage(tmp_path / "files")
    for records in chain():
        write_records(files, records)
    assert len(files.list(SHARDS_PREFIX)) == 6
    want = load_progress(files, BOUNDS, "run", repair=True)
    got = load_progress(storage, BOUNDS, "run", repair=True)
    assert {s: p.records for s, p in got.items()} == {s: p.records for s, p in want.items()}
    assert all(p.done for p in got.values())
    assert count_committed_chunks(storage) == count_committed_chunks(files) == 0  # records without chunks


@pytest.mark.parametrize("cut", ["mid-line", "newline", "zeros"])
def test_a_torn_last_line_ends_the_log_and_only_its_round_is_redone(tmp_path, cut):
    storage, log, _ = logged(tmp_path)
    data = storage.read_bytes(log.key)
    last = data[:-1].rfind(b"\n") + 1  # the start of the last line: shard 1's round 2
    torn = {
        "mid-line": data[: last + 10],
        "newline": data[:-1],
        "zeros": data[:last] + b"\0" * (len(data) - last),
    }[cut]
    with open(os.path.join(storage.root, *log.key.split("/")), "wb") as f:
        f.write(torn)
    assert inputs_done(storage, repair=True) == {0: 6, 1: 4}
    assert storage.list(SHARDS_PREFIX) == [log.key]  # a log is never cut or deleted by a resume


def test_lines_after_a_torn_one_are_never_read(tmp_path):
    """A power cut may write a later page of a log and not an earlier one (both after the last
    barrier): the lines past the hole were never durable, and are dropped with it, without an
    error even for the claimant's strict read."""
    storage, log, _ = logged(tmp_path)
    lines = lines_of(storage, log.key)
    lines[2] = b"\0" * len(lines[2])  # shard 0's round 1
    storage.write_bytes(log.key, b"\n".join(lines))
    assert inputs_done(storage, repair=True) == {0: 2, 1: 2}


def test_a_damaged_line_is_refused_naming_the_log_and_the_line(tmp_path):
    storage, log, _ = logged(tmp_path)
    lines = lines_of(storage, log.key)
    lines[3] = lines[3].replace(b'"next_input":10', b'"next_input":12')  # a digit changed on disk
    storage.write_bytes(log.key, b"\n".join(lines))
    with pytest.raises(CorruptStateError, match=r"does not match its checksum") as raised:
        inputs_done(storage)
    assert f"{log.key} (line 4)" in str(raised.value)


def test_a_line_not_one_rounds_file_is_refused(tmp_path):
    """Two shards' records in one line were never written by one round's file."""
    storage, log, _ = logged(tmp_path)
    mixed = record_log.RecordLog(storage)
    from shardwright.protocol.records import seal_records

    mixed.append([seal_records([rec(0, 0, 9, None).to_json(), rec(1, 1, 9, 9).to_json()])])
    with pytest.raises(CorruptStateError, match=r"line 1\) is not one round's"):
        inputs_done(storage)


def test_a_fenced_writers_late_lines_stay_off_the_chain(tmp_path):
    """A (epoch 5) commits round 0; B takes the shards over (epoch 6) and commits rounds 1-2;
    A, paused past its check, appends its round 1 late. B's chain stands, for every reader."""
    storage, a, _ = logged(tmp_path, chain(5)[:1])
    b = record_log.RecordLog(storage)
    for seq in (1, 2):
        write_records(storage, [rec(s, seq, 6, 5 if seq == 1 else 6) for s in (0, 1)], b)
    write_records(storage, [rec(s, 1, 5, 5) for s in (0, 1)], a)  # late
    progress = load_progress(storage, BOUNDS, "run", repair=True)
    assert [r.epoch for r in progress[0].records] == [5, 6, 6] and progress[0].done
    assert sorted(storage.list(SHARDS_PREFIX)) == sorted([a.key, b.key])


def test_another_runs_lines_are_ignored_and_left_to_cleanup(tmp_path):
    storage, log, _ = logged(tmp_path, chain(run="old"))
    write_records(storage, chain(run="run")[0], record_log.RecordLog(storage))
    assert inputs_done(storage, repair=True) == {0: 2, 1: 2}


def test_publish_takes_a_shard_on_trust_only_when_the_logs_listed_are_exactly_ours(tmp_path):
    storage, log, keys = logged(tmp_path)
    known = {s: ShardProgress(s, *b) for s, b in BOUNDS.items()}
    for records in chain():
        for record in records:
            known[record.shard].add(record, log.key)
    _, taken = trusted_progress(storage, BOUNDS, known, "run")
    assert taken == [0, 1]
    foreign = record_log.RecordLog(storage)  # another writer's log: it may hold any shard
    write_records(storage, [rec(0, 1, 9, 5)], foreign)
    progress, taken = trusted_progress(storage, BOUNDS, known, "run")
    # read back: its higher epoch supersedes ours at seq 1, as it does for every reader
    assert taken == [] and [r.epoch for r in progress[0].records] == [5, 9] and progress[1].done
    storage.delete(foreign.key)
    storage.delete(log.key)  # ours gone (a new holder's repair, a hand): read, not trusted
    progress, taken = trusted_progress(storage, BOUNDS, known, "run")
    assert taken == [] and not progress[0].records


def test_the_log_rotates_and_a_clash_of_names_draws_another(tmp_path, monkeypatch):
    monkeypatch.setattr(record_log, "LOG_ROTATE_BYTES", 600)
    storage = LocalStorage(tmp_path / "out")
    log = record_log.RecordLog(storage)
    planted = log.key
    storage.write_bytes(planted, b"not ours\n")  # the same name, already there
    keys = [key for records in chain() for key in write_records(storage, records, log)]
    assert planted not in keys and storage.read_bytes(planted) == b"not ours\n"
    assert len(set(keys)) >= 2, "a log past LOG_ROTATE_BYTES is followed by the next one"
    storage.delete(planted)
    assert inputs_done(storage, repair=True) == {0: 6, 1: 6}


def test_a_log_larger_than_any_writer_makes_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from shardwright.protocol import records

    storage, log, _ = logged(tmp_path)
    monkeypatch.setattr(records, "MAX_RECORD_LOG_BYTES", 100)
    with pytest.raises(CorruptStateError, match="holds more than 100 bytes"):
        inputs_done(storage)


def test_append_never_follows_a_link_nor_blocks_on_a_fifo(tmp_path):
    storage, log, _ = logged(tmp_path, chain()[:1])
    path = os.path.join(storage.root, *log.key.split("/"))
    secret = tmp_path / "secret"
    secret.write_bytes(b"keep\n")
    os.replace(path, str(tmp_path / "moved"))
    os.symlink(secret, path)
    with pytest.raises(OSError):
        storage.append_bytes(log.key, b"x\n", create=False)
    assert secret.read_bytes() == b"keep\n"
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(OSError):  # ENXIO: no reader; never blocks
        storage.append_bytes(log.key, b"x\n", create=False)
    with pytest.raises(PermissionError):
        storage.input_view().append_bytes(log.key, b"x\n", create=False)


def test_cleanup_deletes_our_logs_and_never_a_foreign_file(tmp_path):
    storage, log, _ = logged(tmp_path)
    assert is_state_key(log.key) and not is_state_key(f"{SHARDS_PREFIX}log-notes.jsonl")
    assert not is_state_key(record_log_key("0" * 15, 1))  # a token is 16 hex digits
    storage.write_bytes(f"{SHARDS_PREFIX}log-notes.jsonl", b"mine\n")
    discard_run_state(storage, 0)
    assert storage.list(SHARDS_PREFIX) == [f"{SHARDS_PREFIX}log-notes.jsonl"]


def test_a_pinned_output_appends_through_the_directory_never_a_link_swapped_in(tmp_path, monkeypatch):
    """A service job's held output (storage.pin): the log's directory is reached one name at a
    time without following a link, so a swap after the path check is refused, not written through."""
    from shardwright.errors import OutputDirError
    from shardwright.storage import local as local_module
    from shardwright.storage.pin import PIN_ENV, check_pinned, pin_directory

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    monkeypatch.delenv(PIN_ENV, raising=False)
    pin_directory(os.path.realpath(out))
    monkeypatch.setenv(PIN_ENV, os.environ[PIN_ENV])  # undone after the test
    storage, log, _ = logged(tmp_path, chain()[:1])  # made through the pin, directories too
    assert inputs_done(storage) == {0: 2, 1: 2}
    state = out / ".shardwright"

    def check_then_lose_the_race(pin, path):
        check_pinned(pin, path)
        if not (state / "moved").exists():
            os.rename(state, out / "moved")
            os.symlink(elsewhere, state)

    monkeypatch.setattr(local_module, "check_pinned", check_then_lose_the_race)
    with pytest.raises(OutputDirError, match="replaced by a symbolic link"):
        write_records(storage, chain()[1], log)
    assert os.listdir(elsewhere) == []


def test_a_barrier_flushes_the_logs_directory_only_after_the_append_that_created_it(tmp_path, monkeypatch):
    """Every fsync of a directory is a device flush (~80 us here): a round's append to an
    existing log needs its data flushed, not its name."""
    from shardwright.storage import local as local_module

    flushed: list[str] = []
    original = local_module.fsync_dir

    def counting(directory):
        flushed.append(os.path.basename(directory))
        original(directory)

    monkeypatch.setattr(local_module, "fsync_dir", counting)
    storage, log, _ = logged(tmp_path, chain()[:1])  # the creating append, then a barrier
    assert flushed == ["shards"]
    write_records(storage, chain()[1], log)
    storage.barrier()
    assert flushed == ["shards"]  # data only
    assert inputs_done(storage) == {0: 4, 1: 4}
