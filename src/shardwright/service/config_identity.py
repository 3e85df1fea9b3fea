"""A job's config is part of its run's identity (issue 32 item 7): a job whose config differs
from the one of the interrupted run on the same output is refused at submission (409), naming
the keys that changed, instead of resuming and mixing outputs of both configs in one dataset.

The engine refuses it too (the config is bound as ``functools.partial(fn, config=model)``,
hashed field by field: :mod:`shardwright.engine.identity`); this check answers before the job
is queued, with the keys in the API's terms.
"""

from __future__ import annotations

from ..protocol.manifest import read_manifest
from ..storage import open_storage
from .model import JobState
from .store import JobRecord

__all__ = ["ConfigChangedError", "changed_keys", "check_config_unchanged"]

_MAX_SHOWN = 10


class ConfigChangedError(Exception):
    """The job's config differs from the interrupted run's on the same output."""

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = keys


def changed_keys(old: object, new: object, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ (added, removed or changed), nested dicts followed."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                keys.append(path)
            else:
                keys.extend(changed_keys(old[key], new[key], path))
        return keys
    return [] if old == new else [prefix or "(the whole config)"]


def check_config_unchanged(jobs: list[JobRecord], job: JobRecord, storage_options: dict | None) -> None:
    """ConfigChangedError when the output holds an interrupted run and the newest earlier job on
    it (of the same pipeline) that did not succeed had another config."""
    earlier = [
        j
        for j in jobs
        if j.output_dir == job.output_dir and j.id != job.id and j.pipeline == job.pipeline and j.state.is_terminal()
    ]
    if not earlier:
        return
    last = max(earlier, key=lambda j: j.created_at)
    if last.state == JobState.SUCCEEDED:
        return  # a finished dataset: the engine refuses a changed config over it, naming the fields
    keys = changed_keys(last.config, job.config)
    if not keys:
        return
    try:
        interrupted = read_manifest(open_storage(job.output_dir, storage_options)) is not None
    except Exception:  # unreadable now: the engine's own check stops the job if it must
        return
    if not interrupted:
        return
    shown = ", ".join(keys[:_MAX_SHOWN]) + (f" and {len(keys) - _MAX_SHOWN} more" if len(keys) > _MAX_SHOWN else "")
    raise ConfigChangedError(
        f"config: {shown} differ(s) from the config of job {last.id} ({last.state}), whose run on "
        f"{job.output_dir} is interrupted; resuming it with another config would mix outputs of both in one "
        f"dataset. Retry job {last.id} (POST /api/v1/jobs/{last.id}/retry) or submit with its config to resume, "
        "or choose another output_dir",
        keys,
    )
