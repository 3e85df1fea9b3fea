"""shardwright.process: liveness, identity of a process across pid reuse, how it ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from shardwright.process import describe_exit, is_same_process, kill_stale, pid_alive, process_start


def test_pid_alive_sees_self_and_not_a_reaped_or_zombie_child():
    assert pid_alive(os.getpid())
    assert not pid_alive(0) and not pid_alive(-5)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc_pid = proc.pid
    # wait for it to exit without reaping: a zombie is dead
    os.waitid(os.P_PID, proc_pid, os.WEXITED | os.WNOWAIT)
    assert not pid_alive(proc_pid)
    proc.wait()


def test_process_start_names_one_process_and_kill_stale_spares_a_reused_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        start = process_start(proc.pid)
        assert start is not None and is_same_process(proc.pid, start)
        assert kill_stale(proc.pid, str(int(start) + 1))  # another process with that pid: left alone
        assert proc.poll() is None
        assert kill_stale(proc.pid, start)
        proc.wait(timeout=10)
        assert not is_same_process(proc.pid, start)
    finally:
        proc.kill()
        proc.wait()


def test_describe_exit():
    assert "SIGKILL" in describe_exit(-signal.SIGKILL) and "OOM" in describe_exit(-signal.SIGKILL)
    assert "SIGTERM" in describe_exit(-signal.SIGTERM)
    assert "code 3" in describe_exit(3)
    assert describe_exit(None) == "still running"


def test_fork_safe_lock_is_unlocked_in_a_child_forked_while_it_is_held():
    from shardwright.process import ForkSafeLock

    lock = ForkSafeLock()
    with lock:
        pid = os.fork()
        if pid == 0:  # the child: a plain threading.Lock would still be held here
            os._exit(0 if lock._lock.acquire(timeout=2) else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_reuse_freed_memory_applies_on_glibc_and_can_be_turned_off(monkeypatch):
    """Run in a child: mallopt changes the whole process's allocator."""
    import subprocess
    import sys

    code = "from shardwright.process import reuse_freed_memory; print(reuse_freed_memory())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import platform

    expected = platform.libc_ver()[0] == "glibc"
    assert on.stdout.strip() == str(expected)
    monkeypatch.setenv("SHARDWRIGHT_WORKER_MALLOC", "default")
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "False"


def test_a_worker_whose_main_process_died_before_it_started_exits_at_once():
    """A main process SIGKILLed between forking a worker and the worker's PR_SET_PDEATHSIG
    request: the kernel never sends the signal, so the worker checks its parent is the one the
    pool named, and exits (70) instead of waiting on its task queue for good (seen: an orphan
    left by a Slurm task SIGKILLed mid-start)."""
    import multiprocessing as mp

    from shardwright.engine.worker import worker_main

    ctx = mp.get_context("fork")
    task_q = ctx.Queue()  # never fed: a worker that got past the check would block on it
    not_my_parent = os.getpid() + 1_000_000  # no process's pid: as if the parent had died
    args = (0, None, None, task_q, ctx.Queue(), ctx.Event(), ctx.Array("q", [-1], lock=False), not_my_parent)
    proc = ctx.Process(target=worker_main, args=args, daemon=True)
    proc.start()
    proc.join(timeout=60)  # only stops a hang: the worker exits before it reads anything
    alive = proc.is_alive()
    if alive:
        proc.kill()
    assert not alive and proc.exitcode == 70
