"""``failed_dir=`` (or ``$SHARDWRIGHT_FAILED_DIR``): failure records of many runs in one place.

The output's own failure record (``.shardwright/failed/``) is written first and is the one
the run relies on; a copy goes to ``failed_dir`` (a local path or a bucket URL), best
effort: a failed_dir that cannot be written never fails the run (one warning line before the
run when it cannot even be opened: :func:`usable_failed_dir`, and no copies then). The copy adds
what finds the failure among many runs and clusters: the output, the run, the node, the
task (Slurm task, Kubernetes index, Ray node, or host and pid) and the attempt. When a later
retry of the same call succeeds on that input, a "resolved" record is written beside it.

Keys: ``{output}/{input:012d}-g{generation}-failed.json`` and
``{output}/{input:012d}-g{retry generation}-resolved.json``, where ``{output}`` is the output
URL made into one safe name (letters, digits, ``._-``; never ``.``, ``..`` or ``//``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from dataclasses import asdict

from ..errors import ShardwrightError
from ..process import host_identity
from ..protocol.failures import FailureRecord
from ..protocol.jsonio import dumps
from ..protocol.lease import task_identity
from ..storage import Storage, open_storage

log = logging.getLogger("shardwright")


def output_slug(output_url: str) -> str:
    """The output URL as one safe key segment, unique (a hash of the URL) and readable."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", output_url).strip("._-")[:80] or "output"
    return f"{readable}-{hashlib.blake2b(output_url.encode(), digest_size=6).hexdigest()}"


def this_task() -> str:
    """The scheduler task this process is, else its host and pid."""
    return task_identity() or f"{host_identity()}:{os.getpid()}"


def _why(exc: BaseException) -> str:
    """One line for a log: our errors say what and how to fix it (and never hold secrets);
    anything else is named by its type only."""
    if isinstance(exc, ShardwrightError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return type(exc).__name__


def usable_failed_dir(url: str | None, storage_options: dict | None) -> str | None:
    """``url`` when the failed_dir can be opened and answers (its bucket, credentials and
    endpoint checked once, before the run, with short retries); else None, after one warning
    line that says why and how to fix it: the run goes on without the copies (they are best
    effort) instead of warning once per failed input."""
    if url is None:
        return None
    try:
        open_storage(url, storage_options, create=True).with_short_retries().check()
    except Exception as exc:
        log.warning(
            "failed_dir %s is not usable, so this run keeps its failure records in the output only: %s", url, _why(exc)
        )
        return None
    return url


class FailedDir:
    """Writes the copies of one worker (opened on first use; never raises)."""

    def __init__(self, url: str, storage_options: dict | None, output_url: str, run_id: str):
        self.url, self.storage_options = url, storage_options
        self.output_url, self.run_id = output_url, run_id
        self._storage: Storage | None = None

    def _put(self, key: str, body: dict) -> None:
        try:
            if self._storage is None:
                self._storage = open_storage(self.url, self.storage_options, create=True).with_short_retries()
            self._storage.write_bytes(f"{output_slug(self.output_url)}/{key}", dumps(body))
        except Exception as exc:  # best effort: the output's own record is the one that counts
            log.warning("could not write a failure record to failed_dir %s: %s", self.url, _why(exc))

    def failed(self, record: FailureRecord, node: int) -> None:
        self._put(
            f"{record.input_index:012d}-g{record.generation}-failed.json",
            {
                "status": "failed",
                "output_dir": self.output_url,
                "run_id": self.run_id,
                "node": node,
                "task": this_task(),
                "attempt": record.attempts,
                **asdict(record),
            },
        )

    def resolved(self, input_index: int, generation: int, node: int, attempts: int) -> None:
        self._put(
            f"{input_index:012d}-g{generation}-resolved.json",
            {
                "status": "resolved",
                "output_dir": self.output_url,
                "run_id": self.run_id,
                "input_index": input_index,
                "generation": generation,
                "node": node,
                "task": this_task(),
                "attempt": attempts,
                "host": host_identity(),
                "time": time.time(),
            },
        )
