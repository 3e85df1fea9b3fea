"""A child process for the crash tests: runs one optimize() call described by argv[1] (JSON).

The tests kill it with real signals at random moments and rerun it, then check the
dataset holds every expected sample exactly once, in order.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from shardwright import optimize

CONFIG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}


def _count(i: int) -> None:
    """With ``calls`` (a path) in the config, every call of fn appends its input to that file:
    one short O_APPEND write per call, so concurrent workers never interleave a line, and a
    test reads how often fn ran on each input across every run and stop (and when: the wall
    clock follows the input on its line)."""
    path = CONFIG.get("calls")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{i} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)


def calls_per_input(path: str) -> dict[int, int]:
    """How often fn was called on each input, from the ``calls`` file."""
    counts: dict[int, int] = {}
    for i, _ in call_times(path):
        counts[i] = counts.get(i, 0) + 1
    return counts


def call_times(path: str) -> list[tuple[int, float]]:
    """(input, when) of every call of fn, from the ``calls`` file."""
    return [(int(i), float(t)) for i, t in (line.split() for line in open(path).read().splitlines())]


def _slow() -> None:
    if CONFIG.get("sleep"):
        time.sleep(CONFIG["sleep"])


def _gated(i: int) -> None:
    """With ``gate`` (a path) in the config, input ``i`` waits until that file exists when
    ``i % gate_period >= gate_after``: each shard of ``gate_period`` inputs commits its first
    inputs, then holds its step until the test releases it, so the run is certainly still
    going when the test acts on it, at any load. The wait polls (a short sleep at a time), so
    a held worker still takes its signals and dies with its parent (PR_SET_PDEATHSIG)."""
    gate = CONFIG.get("gate")
    if gate and i % CONFIG["gate_period"] >= CONFIG["gate_after"]:
        deadline = time.monotonic() + 600
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
    _held_after_calls()


_calls = [0]  # fn's calls in this worker process


def _held_after_calls() -> None:
    """With CRASH_HOLD_AFTER=N in the environment (the kill loop's; not in CONFIG, which fn's
    identity would see), each worker process makes N calls, then waits here until it is killed:
    the run can never finish before the kill the test sends at a random moment."""
    hold_after = os.environ.get("CRASH_HOLD_AFTER")
    _calls[0] += 1
    if hold_after and _calls[0] > int(hold_after):
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(0.05)  # short sleeps: a held worker still takes its signals


def _maybe_fail(i: int) -> None:
    fail_at = os.environ.get("CRASH_FAIL_AT")
    if fail_at is not None and i == int(fail_at):
        raise ValueError(f"planned failure at input {i}")
    sleep_at = os.environ.get("CRASH_SLEEP_AT")
    if sleep_at is not None and i == int(sleep_at):
        stuck = os.environ.get("CRASH_STUCK_MARK")
        if stuck:
            open(stuck, "w").close()  # the test waits for this: the stuck input is in flight
        time.sleep(3600)  # a stuck fn: only an abort (a second Ctrl-C) ends the run before the test gives up
    die_at = os.environ.get("CRASH_DIE_AT")
    if die_at is not None and i == int(die_at):
        os._exit(3)


def plain(i: int) -> dict:
    _count(i)
    _gated(i)
    _slow()
    _maybe_fail(i)
    return {"i": i, "sq": i * i, "name": f"item-{i}"}


def filtering(i: int):
    _count(i)
    _gated(i)
    _slow()
    _maybe_fail(i)
    return None if i % 3 == 0 else {"i": i, "sq": i * i, "name": f"item-{i}"}


def generator(i: int):
    _count(i)
    _gated(i)
    _maybe_fail(i)
    for j in range(i % 5):
        _slow()
        yield {"i": i, "j": j, "name": f"item-{i}-{j}"}


def stamped(i: int) -> dict:
    """Like plain, but each call's sample has a random size (an augmentation, a timestamp):
    with chunk_bytes, two runs cut the same inputs into chunks at different places."""
    _count(i)
    _gated(i)
    _slow()
    _maybe_fail(i)
    return {"i": i, "pad": "x" * random.randint(0, 64)}


def padded(i: int) -> dict:
    """Like plain, with ``pad`` bytes of padding (large samples: a writer's buffer of megabytes)."""
    _count(i)
    _gated(i)
    _slow()
    _maybe_fail(i)
    return {"i": i, "pad": "x" * CONFIG.get("pad", 0)}


def located(i: int) -> dict:
    """Like plain, plus the host identity of the process that ran fn (a Ray node's, in a Ray
    task). With ``hosts_dir`` and ``hosts_wanted`` in the config, each call marks its host in
    that directory and waits until that many hosts have: the first tasks cannot finish every
    shard before the last node's task has started, at any load."""
    from shardwright.process import host_identity

    host = host_identity()
    _count(i)
    _gated(i)
    _wait_for_hosts(host)
    _slow()
    _maybe_fail(i)
    return {"i": i, "host": host}


def _wait_for_hosts(host: str) -> None:
    hosts_dir = CONFIG.get("hosts_dir")
    if not hosts_dir:
        return
    import hashlib

    open(os.path.join(hosts_dir, hashlib.sha256(host.encode()).hexdigest()[:16]), "w").close()
    deadline = time.monotonic() + 600  # only stops a hang
    while len(os.listdir(hosts_dir)) < CONFIG["hosts_wanted"] and time.monotonic() < deadline:
        time.sleep(0.05)


FUNCTIONS = {
    "plain": plain,
    "filtering": filtering,
    "generator": generator,
    "stamped": stamped,
    "located": located,
    "padded": padded,
}


def expected(kind: str, n: int) -> list[tuple[int, int]]:
    """(input, output ordinal) of every sample the finished dataset must hold, in order."""
    if kind in ("plain", "stamped", "located", "padded"):
        return [(i, 0) for i in range(n)]
    if kind == "filtering":
        return [(i, 0) for i in range(n) if i % 3]
    return [(i, j) for i in range(n) for j in range(i % 5)]


if __name__ == "__main__":
    result = optimize(
        FUNCTIONS[CONFIG["kind"]],
        list(range(CONFIG["n"])),
        CONFIG["output_dir"],
        chunk_size=CONFIG.get("chunk_size"),
        chunk_bytes=CONFIG.get("chunk_bytes"),
        compression=CONFIG.get("compression"),
        num_workers=CONFIG.get("num_workers", 2),
        storage_options=CONFIG.get("storage_options"),
        verbose=CONFIG.get("verbose", False),
        num_shards=CONFIG.get("num_shards"),
        **CONFIG.get("extra", {}),  # executor=, shared_output=, failed_dir=, on_error=, ...
    )
    print(json.dumps({"items": result.items, "chunks": result.chunks, "resumed": result.resumed}), flush=True)
