"""What one optimize() call did, written to the output's run history when it ends
(protocol.history): how far it got and how it stopped, so that ``shardwright status`` can say
``failed (user error: FnError on input 150)`` after the process is gone."""

from __future__ import annotations

import logging
import signal
import time

from ..protocol.history import Attempt, StopError, attempt_record, new_attempt_id, record_attempt, stop_error
from ..protocol.manifest import Manifest
from ..secrets import redact_exception, secret_values
from ..storage import Storage
from .planning import NodeIdentity
from .progress import Tracker

log = logging.getLogger("shardwright")


class AttemptLog:
    """Collects one call's facts as it runs; :meth:`close` writes them (best effort: a
    history that cannot be written never hides the call's own outcome)."""

    def __init__(self, storage: Storage, node: NodeIdentity, mode: str | None, storage_options: dict | None):
        self.storage = storage
        self.secrets = secret_values(storage_options)
        self.node = node
        self.mode = mode
        self.attempt_id = new_attempt_id()
        self.started_at = time.time()
        self.manifest: Manifest | None = None
        self.tracker: Tracker | None = None
        self.inputs_done_before = 0

    def attach(self, manifest: Manifest, tracker: Tracker) -> None:
        self.manifest, self.tracker = manifest, tracker
        self.inputs_done_before = tracker.inputs_done()

    def close(self, ended: str, error: StopError | None = None) -> Attempt | None:
        tracker = self.tracker
        attempt = attempt_record(
            attempt_id=self.attempt_id,
            run_id=self.manifest.run_id if self.manifest else None,
            mode=self.manifest.mode if self.manifest else self.mode,
            node_rank=self.node.rank,
            num_nodes=self.node.count,
            started_at=self.started_at,
            inputs_total=tracker.inputs_total if tracker else 0,
            inputs_done_before=self.inputs_done_before,
            inputs_done_after=tracker.inputs_done() if tracker else 0,
            items_written=tracker.items if tracker else 0,
            ended=ended,
            error=error,
        )
        try:
            record_attempt(self.storage.with_short_retries(), attempt)
        except Exception as exc:
            log.debug("could not write the run history: %s", exc)
            return None
        return attempt

    def close_for(self, exc: BaseException) -> Attempt | None:
        """Record how ``exc`` ended the call: a signal or Ctrl-C is ``interrupted``; any other
        error ``failed``, with its class, kind and input."""
        if isinstance(exc, KeyboardInterrupt):
            return self.close("interrupted", StopError("KeyboardInterrupt", "user", "interrupted (SIGINT)"))
        if isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else 1
            name = signal.Signals(code - 128).name if 128 < code < 128 + 65 else f"exit {code}"
            return self.close("interrupted", StopError("SystemExit", "user", f"interrupted ({name})"))
        return self.close("failed", stop_error(redact_exception(exc, self.secrets)))
