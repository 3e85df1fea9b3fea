"""One attempt of one job, as its own process: ``python -m shardwright.service.runner JOB_DIR --attempt N``.

Reads the job from ``JOB_DIR/spec.json`` (no secrets in it) and its storage_options from
stdin (never argv or the environment), calls ``shardwright.optimize(...)`` (rerunning the
same call resumes), and reports through a status file written atomically every second (a
:class:`~shardwright.service.model.RunnerReport`: state running|succeeded|failed|interrupted,
progress, error). The
server polls it; a status file survives the server being killed, so a restarted server
still learns how an attempt ended.

Started by the local executor with ``--parent-pid``: the process then dies with the server
(PR_SET_PDEATHSIG) and its optimize() workers die with it, so nothing orphaned keeps writing.
SIGTERM/SIGINT stop it gracefully: optimize() commits what is done and returns.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace

from .. import telemetry
from ..errors import CorruptStateError, UsageError
from ..process import die_with_parent
from ..secrets import redact, secret_values
from ..storage.options import parse_storage_options
from ..storage.pin import pin_directory
from ..tally import COUNTERS_DIR_ENV
from .locations import check_output_location
from .model import JobError, Progress, ReportState, RunnerReport, RunResult
from .progress import read_progress


def status_path(job_dir: str, attempt: int, task: str | None = None) -> str:
    return os.path.join(job_dir, f"attempt-{attempt}.json" if task is None else f"attempt-{attempt}-task-{task}.json")


def counters_path(job_dir: str, attempt: int) -> str:
    """Where the attempt's processes keep their run counters (shardwright.tally; a Slurm
    array's tasks too: the files are named by host and pid)."""
    return os.path.join(job_dir, f"attempt-{attempt}-counters")


MAX_STATUS_BYTES = 1_000_000


def read_status(path: str) -> RunnerReport | None:
    """The last report in a status file; None when there is none (yet) or it cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STATUS_BYTES + 1)
        if len(data) > MAX_STATUS_BYTES:
            return None
        return RunnerReport.from_json(json.loads(data), path)
    except (OSError, ValueError, CorruptStateError):
        return None


class StatusFile:
    def __init__(self, path: str, attempt: int):
        self.path, self.lock = path, threading.Lock()
        self.report = RunnerReport(attempt=attempt, pid=os.getpid(), started_at=time.time())

    def write(self, **fields) -> None:
        if fields.get("state", ReportState.RUNNING) is not ReportState.RUNNING:
            telemetry.get().flush()  # the counters are complete before the server reads the end
        with self.lock:
            self.report = replace(self.report, **fields, updated_at=time.time())
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.report.to_json(), f)
            os.replace(tmp, self.path)


class _Stop(Exception):
    pass


def _progress_loop(status: StatusFile, output_dir, storage_options, total: int, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        progress = read_progress(output_dir, storage_options, total)
        if progress is not None:
            status.write(progress=progress.progress)


def _check_location(spec: dict) -> None:
    """Again at start: a directory of the path may have become a symbolic link while queued.
    Then a local output directory is held for the whole job (storage.pin): a directory on the
    way, or the engine's own state, swapped for a link while the job runs is refused before
    anything is written through it."""
    if "output_roots" not in spec:  # a spec written by a server before this check existed
        return
    normalized = check_output_location(
        spec["output_dir"], tuple(spec["output_roots"]), tuple(spec.get("state_dirs") or ())
    )
    if normalized != spec["output_dir"]:
        raise UsageError(
            f"output_dir: {spec['output_dir']} now resolves to {normalized} (a directory on the way was "
            "replaced by a symbolic link since the job was submitted); refusing to write there"
        )
    if "://" not in normalized:
        if not os.path.lexists(normalized):
            os.makedirs(normalized, exist_ok=True)
        if os.path.isdir(normalized):  # a file there: optimize() says so in its own words
            pin_directory(normalized)  # refuses it if a link appeared while it was being created


def _connect_ray_with_the_pipelines() -> None:
    """Connect to the service's Ray cluster (RAY_ADDRESS) so that its workers import the
    pipelines' module as this process does: Ray's workers do not inherit the driver's
    PYTHONPATH, so it travels in the job's runtime environment."""
    import ray  # the "ray" extra; only Ray jobs get here

    if not ray.is_initialized():
        env_vars = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
        ray.init(runtime_env={"env_vars": env_vars}, log_to_driver=False, configure_logging=False)


def run(job_dir: str, attempt: int, storage_options: dict | None, task: str | None) -> int:
    with open(os.path.join(job_dir, "spec.json")) as f:
        spec = json.load(f)
    secrets = secret_values(storage_options)
    status = StatusFile(status_path(job_dir, attempt, task), attempt)
    inputs = spec["inputs"]
    total = len(inputs) if isinstance(inputs, list) else 0  # a source: counted once it is built
    status.write(progress=Progress(0, total, 0))
    os.environ[COUNTERS_DIR_ENV] = counters_path(job_dir, attempt)  # for GET /metrics; workers inherit it
    telemetry.reset()
    print(
        f"[shardwright-service] job {spec['job_id']} attempt {attempt}"
        f"{f' task {task}' if task is not None else ''}: pid {os.getpid()}, pipeline {spec['pipeline']}, "
        f"{total} inputs -> {spec['output_dir']}",
        file=sys.stderr,
        flush=True,
    )

    def on_signal(signum, frame):  # before/after optimize's own handlers are installed
        raise _Stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop = threading.Event()
    try:
        _check_location(spec)
        if isinstance(inputs, dict):  # a source (service.input_sources): checked again, then listed
            from .input_sources import check_input_location, open_source

            if check_input_location(inputs["url"], tuple(spec.get("input_roots") or ())) != inputs["url"]:
                raise UsageError(f"inputs.url: {inputs['url']} now resolves elsewhere (a link); refusing to read it")
            inputs = open_source(inputs, storage_options, spec.get("max_inputs"))
            total = len(inputs)
            status.write(progress=Progress(0, total, 0))
        for entry in reversed(spec.get("sys_path") or []):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        from .pipelines import load_pipelines

        pipelines = load_pipelines(spec["module"], spec.get("pipeline_names"))
        if spec["pipeline"] not in pipelines:
            raise LookupError(f"pipeline {spec['pipeline']!r} is no longer in module {spec['module']}")
        fn = pipelines[spec["pipeline"]].bound(spec["config"])
        from ..engine import optimize

        if task is None:
            threading.Thread(
                target=_progress_loop, daemon=True, args=(status, spec["output_dir"], storage_options, total, stop)
            ).start()
        engine = spec.get("engine") or {}  # {"executor": "ray", ...}: a Ray job (absent in older specs)
        if engine.get("executor") == "ray":
            _connect_ray_with_the_pipelines()
        result = optimize(fn, inputs, spec["output_dir"], storage_options=storage_options, **spec["options"], **engine)
        stop.set()
        seen = read_progress(spec["output_dir"], storage_options, total)
        progress = seen.progress if seen else Progress(0, total, 0)
        if result.published:
            progress = Progress(total, total, progress.items or result.items)
        print(f"[shardwright-service] done: {result}", file=sys.stderr, flush=True)
        outcome = RunResult(result.published, result.items, result.resumed)
        if task is None and not result.published:
            # one node runs every shard: returning unpublished means the dataset is not there
            status.write(
                state=ReportState.FAILED,
                progress=progress,
                result=outcome,
                finished_at=time.time(),
                error=JobError.system(
                    "NotPublished", f"optimize() returned without publishing the dataset: {result}"[:2000]
                ),
            )
            return 1
        status.write(state=ReportState.SUCCEEDED, progress=progress, finished_at=time.time(), result=outcome)
        return 0
    except (_Stop, KeyboardInterrupt) as exc:
        return _interrupted(status, str(exc) or "signal", stop)
    except SystemExit as exc:
        if isinstance(exc.code, int) and exc.code >= 128:  # optimize() stopped on SIGTERM/SIGINT at a commit point
            return _interrupted(status, signal.Signals(exc.code - 128).name, stop)
        raise
    except BaseException as exc:
        stop.set()
        error = JobError.from_exception(exc)
        error = replace(error, message=redact(error.message, secrets))
        print(redact("".join(traceback.format_exception(exc)), secrets), file=sys.stderr, flush=True)
        status.write(state=ReportState.FAILED, error=error, finished_at=time.time())
        return 1


def _interrupted(status: StatusFile, how: str, stop: threading.Event) -> int:
    stop.set()
    print(f"[shardwright-service] stopped by {how}; committed work is kept", file=sys.stderr, flush=True)
    status.write(state=ReportState.INTERRUPTED, signal=how, finished_at=time.time())
    return 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardwright.service.runner")
    parser.add_argument("job_dir")
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, help="die with this process (the server)")
    parser.add_argument("--slurm", action="store_true", help="one task of a Slurm array (no stdin)")
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)  # the server died: nothing orphaned keeps writing
    storage_options = None
    task = None
    if args.slurm:
        task = os.environ.get("SLURM_ARRAY_TASK_ID", "0")
    else:
        storage_options = parse_storage_options(sys.stdin.read())
    return run(args.job_dir, args.attempt, storage_options, task)


if __name__ == "__main__":
    sys.exit(main())
