"""The same dataset bytes and digest whatever the parallelism, the crash schedule and the
graceful stops (SIGTERM, Ctrl-C: each worker's chunk in progress kept as a pending tail) (issue 35),
with a fixed num_shards and with the default one (which comes from the inputs alone). Chunk
names come from their content (protocol 6), so every file name is compared too."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest

from shardwright.cli.main import main
from support.crash_child import calls_per_input
from support.digests import contents, every_file
from support.helpers import (
    assert_exactly_once,
    committed_records,
    finish,
    group_pids,
    kill_group,
    kill_loop,
    start_child,
    wait_for,
)

pytestmark = pytest.mark.slow

# the 200k inputs: SHARDWRIGHT_DIGEST_INPUTS=200000 (minutes, not in CI)
INPUTS = int(os.environ.get("SHARDWRIGHT_DIGEST_INPUTS", "3000"))
SLEEP = 0.001 if INPUTS <= 10_000 else 0.0  # a few seconds of work, so the kills land mid-run


def test_same_digest_and_chunk_bytes_for_1_2_4_workers_and_after_sigkills(tmp_path, capsys):
    base = {"kind": "generator", "n": INPUTS, "chunk_size": 50, "num_shards": 8}
    runs = {}
    for workers in (1, 2, 4):
        config = {**base, "num_workers": workers, "output_dir": str(tmp_path / f"w{workers}")}
        finish(config)
        assert_exactly_once(config)
        runs[workers] = contents(Path(config["output_dir"]))
    killed = {**base, "sleep": SLEEP, "output_dir": str(tmp_path / "killed")}
    kills = kill_loop(killed, random.Random("digest"), kills_wanted=3, check=lambda: None)
    assert kills >= 1, "no kill landed"
    killed["num_workers"] = 2
    finish(killed)
    assert_exactly_once(killed)
    runs["killed"] = contents(Path(killed["output_dir"]))
    assert len({json.dumps(r) for r in runs.values()}) == 1, {k: v[0] for k, v in runs.items()}
    assert main(["verify", killed["output_dir"]]) == 0
    assert runs[1][0] in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "w1"), killed["output_dir"]]) == 0


def default_shard_runs(tmp_path: Path) -> dict[object, Path]:
    """The same inputs (3,000 unless SHARDWRIGHT_DIGEST_INPUTS) with the default num_shards on 1, 2 and 4 workers, and killed 3
    times then finished on 2: the default count comes from the inputs alone (issue 35)."""
    base = {"kind": "generator", "n": INPUTS, "chunk_size": 50}
    outs: dict[object, Path] = {}
    for workers in (1, 2, 4):
        config = {**base, "num_workers": workers, "output_dir": str(tmp_path / f"w{workers}")}
        finish(config)
        assert_exactly_once(config)
        outs[workers] = Path(config["output_dir"])
    killed = {**base, "sleep": SLEEP, "output_dir": str(tmp_path / "killed")}
    assert kill_loop(killed, random.Random("default-shards"), kills_wanted=3, check=lambda: None) >= 1
    killed["num_workers"] = 2
    finish(killed)
    assert_exactly_once(killed)
    outs["killed"] = Path(killed["output_dir"])
    return outs


def test_default_num_shards_same_files_and_index_for_1_2_4_workers_and_after_sigkills(tmp_path):
    runs = {k: every_file(out) for k, out in default_shard_runs(tmp_path).items()}
    assert len(runs[1][1]["chunks"]) > 4  # not one chunk per worker: the default cut, 16 shards
    assert len({json.dumps(r, sort_keys=True) for r in runs.values()}) == 1, {k: sorted(v[0]) for k, v in runs.items()}


# --- graceful stops: Ctrl-C and SIGTERM keep the cut too ------------------------------------------


def stop_rounds(config: dict, signals: list[tuple[int, bool]]) -> int:
    """Start the call and send it the next of ``signals`` (signal, to the whole group?) once it
    has committed a chunk more than before (an event, never a delay), on 2, 1, then 3 workers.
    A graceful stop must end cleanly (exit 130 for SIGINT, 143 for SIGTERM). Returns the
    signals that landed: a run that finished before its signal lands none."""
    out = config["output_dir"]
    landed = 0
    for (sig, to_group), workers in zip(signals, [2, 1, 3] * len(signals)):
        before = committed_records(out)
        proc = start_child({**config, "num_workers": workers})
        try:
            assert wait_for(lambda: proc.poll() is not None or committed_records(out) > before, 120)  # noqa: B023
            if to_group:
                kill_group(proc, sig)  # a terminal's Ctrl-C reaches the whole group; SIGKILL too
            else:
                os.kill(proc.pid, sig)  # a scheduler's SIGTERM (scancel, requeue, preemption, a pod deleted)
            _, err = proc.communicate(timeout=120)
        finally:
            kill_group(proc)
        if proc.returncode == 0:
            break  # finished before the signal: nothing left to stop
        landed += 1
        if sig == signal.SIGKILL:
            assert wait_for(lambda: not group_pids(proc.pid), 10), "workers outlived the SIGKILL"  # noqa: B023
            continue
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), err[-3000:]
        assert "Rerun the same call to resume." in err, err[-3000:]
    return landed


TERM, INT, KILL = (signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGKILL, True)


@pytest.mark.parametrize(
    ("kind", "signals"),
    [
        pytest.param("plain", [TERM] * 3, id="sigterm"),
        pytest.param("plain", [INT] * 3, id="ctrl-c"),
        pytest.param("generator", [TERM] * 3, id="sigterm-generator"),
        pytest.param("plain", [TERM, KILL, INT, TERM], id="mixed-with-sigkill"),
    ],
)
def test_graceful_stops_keep_every_file_and_the_digest_and_call_fn_once_per_input(tmp_path, kind, signals):
    """Ctrl-C and SIGTERM used to commit each worker's partly filled chunk, so the resumed
    shard cut its later chunks elsewhere (three scancels: 140 chunks where a clean run has
    128). Now the chunk in progress is kept as a pending tail and reopened by the resume: the
    same files, bytes and digest as a run never stopped, and fn called once per input. (A
    generator stopped between two of its outputs is called again on that input, which skips
    the outputs kept; a SIGKILL repeats the calls past the last record or tail.)"""
    base = {"kind": kind, "n": INPUTS, "chunk_size": 50, "num_shards": 8}
    reference = {**base, "num_workers": 1, "output_dir": str(tmp_path / "clean")}
    finish(reference)
    stopped = {**base, "sleep": SLEEP, "calls": str(tmp_path / "calls"), "output_dir": str(tmp_path / "stopped")}
    assert stop_rounds(stopped, signals) >= 1, "no stop landed mid-run"
    finish({**stopped, "num_workers": 2})
    assert_exactly_once(stopped)
    assert every_file(Path(stopped["output_dir"])) == every_file(Path(reference["output_dir"]))
    calls = calls_per_input(stopped["calls"])
    assert sorted(calls) == list(range(INPUTS)), "fn never ran on some inputs"
    again = {i: n for i, n in calls.items() if n > 1}
    if kind == "generator":
        assert len(again) <= 3 * 8, again  # at most the input each shard's writer stopped inside, per stop
    elif KILL not in signals:
        assert not again, f"fn ran again on {len(again)} input(s) whose sample was kept: {sorted(again)[:10]}"


@pytest.mark.parametrize("point", ["before_snapshot", "after_snapshot"])
def test_a_crash_while_a_stop_writes_its_pending_tail_loses_and_repeats_nothing(tmp_path, point):
    """SIGTERM, then each stopping worker dies (as a SIGKILL or a power cut would) right before
    or right after its pending tail is written: before, the records alone stand and the tail's
    inputs are run again; after, the resume reopens the tail. Either way every input is in the
    dataset once and its files and digest are those of a run never stopped."""
    base = {"kind": "plain", "n": INPUTS, "chunk_size": 50, "num_shards": 8}
    reference = {**base, "num_workers": 1, "output_dir": str(tmp_path / "clean")}
    finish(reference)
    out = tmp_path / "stopped"
    stopped = {**base, "sleep": SLEEP, "num_workers": 2, "output_dir": str(out)}
    proc = start_child(stopped, SHARDWRIGHT_CRASH_AT=point)
    try:
        assert wait_for(lambda: proc.poll() is not None or committed_records(str(out)) > 0, 120)
        assert proc.poll() is None, "the run ended before its stop"
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    assert proc.returncode != 0, err[-3000:]
    tails = list((out / ".shardwright" / "progress").glob("*.bin"))
    assert bool(tails) == (point == "after_snapshot"), tails
    finish(stopped)
    assert_exactly_once(stopped)
    assert every_file(out) == every_file(Path(reference["output_dir"]))
