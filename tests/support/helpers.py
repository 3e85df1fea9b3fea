"""Shared test helpers: run crash_child.py as a real process, signal it, read datasets back."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).parent
CHILD = str(HERE / "crash_child.py")


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent.parent / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_child(config: dict, **env: str) -> subprocess.Popen:
    """Start the child in its own session, so killpg reaches it and its workers only."""
    return subprocess.Popen(
        [sys.executable, CHILD, json.dumps(config)],
        env=child_env(**env),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_child(config: dict, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    proc = start_child(config, **env)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _live_processes():
    """(pid, parent pid, process group) of every live (non-zombie) process, from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            yield int(entry), int(fields[1]), int(fields[2])


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (zombies excluded)."""
    return [pid for pid, _, pgrp in _live_processes() if pgrp == pgid]


def children_of(pid: int) -> list[int]:
    return sorted(child for child, parent, _ in _live_processes() if parent == pid)


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def read_pairs(output_dir: str, storage_options: dict | None = None) -> list[tuple[int, int]]:
    """(input, output ordinal) of every item, in dataset order, read with our reader."""
    from shardwright import StreamingDataset

    ds = StreamingDataset(output_dir, storage_options=storage_options)
    return [(item["i"], item.get("j", 0)) for item in ds]


def committed_records(output_dir: str, storage_options: dict | None = None) -> int:
    """Commit rounds (record files, one per shard and commit round holding >= 1 record, or the
    lines of a worker's record log: protocol.record_log) of an output, local or s3://, read
    through shardwright's own protocol reader."""
    return len(committed_chunk_names(output_dir, storage_options))


def committed_chunk_names(output_dir: str, storage_options: dict | None = None) -> dict[str, list[str]]:
    """{record file or log line: [chunk filenames its records commit]} of an output (local or
    s3://), parsed by shardwright's own record reader (torn or unreadable files commit nothing)."""
    from concurrent.futures import ThreadPoolExecutor

    from shardwright.protocol.records import read_record_file, read_record_log, record_listing
    from shardwright.storage import open_storage

    storage = open_storage(output_dir, storage_options)
    by_shard, logs = record_listing(storage)  # one listing: record files and record logs
    keys = [key for keys in by_shard.values() for key in keys]

    def names(key: str) -> list[tuple[str, list[str]]]:
        try:
            if key in logs:
                rounds = read_record_log(storage, key)
            else:
                rounds = [(key, read_record_file(storage, key) or [])]
        except FileNotFoundError:
            return []  # deleted by a publisher cleaning up meanwhile
        return [(where, [r.chunk.filename for r in records if r.chunk is not None]) for where, records in rounds]

    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(pair for found in pool.map(names, keys + logs) for pair in found)


def chunks_named_but_missing(output_dir: str, storage_options: dict | None = None) -> tuple[int, list[str]]:
    """(number of committed chunks, "record file -> chunk" for every committed chunk that does
    not exist) of an output. Call it while nothing writes there (after a kill)."""
    from shardwright.storage import open_storage

    present = set(open_storage(output_dir, storage_options).list(""))
    named = committed_chunk_names(output_dir, storage_options)
    missing = [f"{key} -> {name}" for key, names in named.items() for name in names if name not in present]
    return sum(len(names) for names in named.values()), missing


# --- kill loops and their checks (local and S3) --------------------------------------------------


def finish(config: dict, **env) -> None:
    """Run the same call to completion (a no-op if the last run already finished)."""
    done = run_child(config, **env)
    assert done.returncode == 0, done.stderr[-3000:]


def assert_exactly_once(config: dict, storage_options: dict | None = None) -> None:
    from support.crash_child import expected

    options = dict(storage_options) if storage_options else None
    assert read_pairs(config["output_dir"], options) == expected(config["kind"], config["n"])


def kill_loop(
    config: dict,
    rng: random.Random,
    kills_wanted: int,
    check,
    early: tuple[float, float] = (0.1, 0.8),
    records_options: dict | None = None,
) -> int:
    """Start, SIGKILL the whole group at a random moment, check, repeat; returns kills landed.

    A quarter of the kills land early (start-up, lease takeover, resume); the others a random
    moment after the run has committed something new, so every round makes progress. Each
    worker is held after a random 3 to 4 chunks' worth of calls (CRASH_HOLD_AFTER) until the
    kill: the run cannot end before it, so every kill lands, at any load."""
    url = config["output_dir"]
    options = records_options if records_options is not None else config.get("storage_options")
    chunk = config.get("chunk_size") or 10
    kills = 0
    for _attempt in range(kills_wanted * 3):
        config["num_workers"] = rng.choice([1, 2, 3])
        before = committed_records(url, options)
        early_kill = rng.random() < 0.25
        delay = rng.uniform(*early) if early_kill else rng.uniform(0.0, 0.4)
        hold_after = rng.randint(3 * chunk, 4 * chunk)
        if config.get("kind") == "filtering":
            # fn keeps 2 inputs in 3: hold after 3 to 4 chunks of *outputs*, or a worker can hold
            # with too few items handed to its writer for a chunk, and the wait below never ends
            hold_after = hold_after * 3 // 2 + chunk
        proc = start_child(config, CRASH_HOLD_AFTER=str(hold_after))
        if not early_kill:
            committed = wait_for(
                lambda: proc.poll() is not None or committed_records(url, options) > before,  # noqa: B023
                120,  # a bound for a run that cannot commit, not a guess at how fast one starts
                0.02,
            )  # called right here, in this iteration
            # One new record file, not two: a committer round can commit several chunks in one
            # file, and the items fn made since the hot loop last looked (every 20 ms) are
            # not handed to the writer while fn is held.
            assert committed, f"the run held (CRASH_HOLD_AFTER={hold_after}) before committing a new record"
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            kills += 1
            assert wait_for(lambda: not group_pids(proc.pid), 5), "processes left after SIGKILL of the group"  # noqa: B023
            check()
            if kills >= kills_wanted:
                break
            continue
        assert proc.returncode == 0, proc.stderr.read()[-3000:]
        break
    return kills


def errors_of_threads(target, seeds) -> list[BaseException]:
    """Run ``target(seed)`` on one thread per seed; return what they raised."""
    import threading

    errors: list[BaseException] = []

    def run(seed):
        try:
            target(seed)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def fork_pool_map(fn, jobs: list, processes: int, timeout: float = 120) -> list:
    """``Pool.map`` over forked processes, bounded: a child that hangs (a lock some thread of
    this process held at the fork) fails the test in ``timeout`` s, and its processes are
    SIGKILLed rather than left to a ``terminate()`` that waits forever on a child stuck below
    Python, where SIGTERM's handler never runs."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    before = {p.pid for p in multiprocessing.active_children()}
    pool = ctx.Pool(processes)
    try:
        results = pool.map_async(fn, jobs, chunksize=1).get(timeout=timeout)
    except multiprocessing.TimeoutError:
        for child in multiprocessing.active_children():
            if child.pid not in before:
                child.kill()
        raise AssertionError(f"forked pool workers did not finish {len(jobs)} jobs in {timeout} s") from None
    pool.close()
    pool.join()
    return results


def max_attempts_within(retry_timeout: float) -> int:
    """The most attempts the store's retry loop can make within ``retry_timeout`` seconds, by
    its backoff (each delay at least half of ``min(4, 0.1 * 2**attempt)``; an attempt is only
    made if its delay ends before the budget): a count, whatever the machine's speed (a loaded
    machine makes fewer, never more). 6 for 2 s; the default 60 s allows 20 and more."""
    attempts, waited = 1, 0.0
    while waited + min(4.0, 0.1 * 2 ** (attempts - 1)) * 0.5 < retry_timeout:
        waited += min(4.0, 0.1 * 2 ** (attempts - 1)) * 0.5
        attempts += 1
    return attempts


def assert_attempts_are_the_failed_requests(message: str, failed_requests: int, retry_timeout: float = 2) -> None:
    """A store's final "kept failing" error, checked by counts, not by the wall clock: each
    attempt it reports is exactly one request the fault proxy failed (one retry loop, no SDK
    retries nested in it), and there are no more than ``retry_timeout`` allows
    (:func:`max_attempts_within`). ``failed_requests`` must count this operation's requests
    only (e.g. ``proxy.stats["503 PUT"]`` with the faults limited to that method: an SDK's
    own background requests, such as google-cloud-storage's bucket metadata lookups, go
    through the same proxy)."""
    import re

    found = re.search(r"kept failing for \d+ s \((\d+) attempts?,", message)
    assert found, message
    attempts = int(found.group(1))
    assert attempts == failed_requests, (attempts, failed_requests, message)
    assert 1 <= attempts <= max_attempts_within(retry_timeout), (attempts, retry_timeout, message)


@contextlib.contextmanager
def counted_store_requests(directory: str | Path) -> Iterator[Callable[[], dict[str, int]]]:
    """Count the store requests of this process (and of the worker processes it starts) with
    shardwright's own run counters (``SHARDWRIGHT_COUNTERS_DIR``, shardwright.tally: what the
    jobs service's /metrics reads). Yields ``counts()``: ``{outcome: n}`` so far (requests of
    any verb), e.g. ``{"unreachable": 2}``. Proves "gave up without retrying" by a count, not
    by how long it took."""
    from shardwright import telemetry
    from shardwright.tally import COUNTERS_DIR_ENV, read_counters

    old = os.environ.get(COUNTERS_DIR_ENV)
    os.environ[COUNTERS_DIR_ENV] = str(directory)
    telemetry.reset()

    def counts() -> dict[str, int]:
        telemetry.get().flush()  # this process's counts to its file; workers wrote theirs at exit
        by_outcome: dict[str, int] = {}
        for (_verb, outcome), n in read_counters(str(directory)).store_requests.items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + n
        return by_outcome

    try:
        yield counts
    finally:
        if old is None:
            os.environ.pop(COUNTERS_DIR_ENV, None)
        else:
            os.environ[COUNTERS_DIR_ENV] = old
        telemetry.reset()
