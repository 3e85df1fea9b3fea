"""The server's settings (``shardwright serve``'s options), one frozen record that the
scheduler, the job files and the API read."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .transitions import RetryPolicy

__all__ = ["ServiceConfig"]


@dataclass(frozen=True)
class ServiceConfig:
    db_path: str
    state_dir: str
    module: str
    module_path: str | None = None  # directory to put on sys.path of job processes
    max_running: int = 2
    auto_retries: int = 2
    retry_backoff: float = 1.0
    cancel_grace: float = 30.0
    poll_interval: float = 0.25
    output_roots: tuple[str, ...] = ()
    input_roots: tuple[str, ...] = ()  # where jobs whose inputs are a source may read (service.input_sources)
    max_inputs: int = 100_000
    max_queued: int = 1000  # --max-queued: PENDING jobs at most (each is a store row and a /metrics series)
    max_body_bytes: int = 16 * 1024 * 1024
    pipeline_names: tuple[str, ...] | None = None  # --pipelines MODULE:a,b (None: every public function)
    ray_address: str | None = None  # --ray-address: where jobs of executor kind "ray" run (None: no Ray jobs)
    metrics_public: bool = False  # --metrics-public: GET /metrics without the token

    @property
    def state_dirs(self) -> tuple[str, ...]:
        """Directories holding the service's own state (no job may write there)."""
        return tuple(sorted({os.path.dirname(self.db_path), self.state_dir}))

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.auto_retries, self.retry_backoff)
