"""Each job's files next to the store: ``JOBS_FILES/jobs/ID/`` (mode 700) holds its spec (what
the job process runs; no secrets), its attempts' status files and its log."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..secrets import redact, secret_values
from ..tally import RunCounts, read_counters
from .config import ServiceConfig
from .model import RunnerReport
from .runner import counters_path, read_status, status_path
from .store import JobRecord, StoreFullError, is_disk_full

SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../src


def engine_arguments(executor: dict) -> dict:
    """optimize()'s engine arguments of a job's executor spec (``{"kind": "ray", ...}``)."""
    if executor.get("kind") != "ray":
        return {}
    args: dict = {"executor": "ray", "shared_output": bool(executor.get("shared_output", False))}
    if executor.get("ray_remote_args"):
        args["ray_remote_args"] = executor["ray_remote_args"]
    return args


class JobFiles:
    def __init__(self, config: ServiceConfig):
        self.config = config
        os.makedirs(os.path.join(config.state_dir, "jobs"), mode=0o700, exist_ok=True)

    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.config.state_dir, "jobs", job_id)

    def log_path(self, job_id: str) -> str:
        return os.path.join(self.job_dir(job_id), "log.txt")

    def report(self, job_id: str, attempt: int) -> RunnerReport | None:
        return read_status(status_path(self.job_dir(job_id), attempt))

    def counters(self, job_id: str, attempt: int) -> RunCounts:
        """What the attempt's processes counted (store requests, retries, bytes: shardwright.tally)."""
        return read_counters(counters_path(self.job_dir(job_id), attempt))

    @contextmanager
    def new_job_dir(self, job: JobRecord) -> Iterator[str]:
        """Create the job's directory and spec; removed again if anything in the block fails
        (a full disk, a busy output), so no orphan is left."""
        path = self.job_dir(job.id)
        spec = {
            "job_id": job.id,
            "module": self.config.module,
            "pipeline_names": list(self.config.pipeline_names) if self.config.pipeline_names else None,
            "sys_path": [self.config.module_path or os.getcwd()],
            "pipeline": job.pipeline,
            "inputs": job.inputs,
            "output_dir": job.output_dir,
            "output_roots": list(self.config.output_roots),
            "input_roots": list(self.config.input_roots),
            "max_inputs": self.config.max_inputs,
            "state_dirs": list(self.config.state_dirs),
            "config": job.config,
            "options": job.options,
            "engine": engine_arguments(job.executor),
        }
        try:
            os.makedirs(path, mode=0o700)
            with open(os.path.join(path, "spec.json"), "w") as f:
                json.dump(spec, f)
            yield path
        except BaseException as exc:
            shutil.rmtree(path, ignore_errors=True)
            if is_disk_full(exc) and not isinstance(exc, StoreFullError):
                raise StoreFullError(f"the disk under the job store is full ({exc}): free space there") from None
            raise

    def remove(self, job_id: str) -> None:
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def log_attempt(self, job_id: str, number: int, trigger: str, started: float) -> None:
        with open(self.log_path(job_id), "a") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
            log.write(f"=== attempt {number} ({trigger}) at {stamp}\n")

    def log_paths(self, job_id: str) -> list[str]:
        paths = [self.log_path(job_id)]
        slurm_logs = os.path.join(self.job_dir(job_id), "slurm-logs")
        if os.path.isdir(slurm_logs):
            paths += [os.path.join(slurm_logs, n) for n in sorted(os.listdir(slurm_logs))]
        return paths

    def log_text(self, job_id: str, tail_bytes: int, storage_options: dict | None) -> str:
        """The job's log (the end of each file), secrets redacted, progress bars at their last state."""
        parts = []
        paths = self.log_paths(job_id)
        for path in paths:
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.path.getsize(path) - tail_bytes))
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if path != paths[0]:
                text = f"=== {os.path.basename(path)}\n{text}"
            parts.append(text)
        text = "".join(parts)
        # progress bars redraw with \r: keep the last state of each line
        text = "\n".join(
            line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r") for line in text.split("\n")
        )
        return redact(text, secret_values(storage_options))

    def job_env(self, kind: str = "local") -> dict:
        """The environment of job processes (and sbatch: Slurm clients need the server's SLURM_CONF);
        a Ray job's driver connects to the service's Ray cluster (RAY_ADDRESS), any other job to none."""
        env = {k: v for k, v in os.environ.items() if k not in ("SHARDWRIGHT_API_TOKEN", "RAY_ADDRESS")}
        if kind == "ray" and self.config.ray_address:
            env["RAY_ADDRESS"] = self.config.ray_address
        extra = [p for p in (self.config.module_path, SRC_DIR) if p]
        env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env
