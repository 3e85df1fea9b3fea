"""Shard claims (protocol 5, step 0): a shard is written only under its own claim.

A claim is a :class:`~shardwright.protocol.lease.Lease` named ``shard-{shard:05d}``: taken
before the shard's records are read to resume it, renewed while it is worked on, released
once its ``done`` record is committed. Its epoch is the one the shard's chunk and record
names carry, and the committer checks it before each record write of that shard. So the
unit of fencing is the shard, and a shard can move to another node (a lost Ray node's
shards resume on the others) without waiting for the node that held it.

Claims are taken and released with ``durable=False`` (no fsync on local disk: two fsyncs a
claim and one a release were most of a small run's serial path, issue 36). A claim only
matters while its holder lives, and every live process sees it at once; a power cut, which
could undo it, also ends every holder. What it may leave is harmless: a claim file lost
(the shard is free, and its next holder's epoch is above the old one by the clock, as
after any takeover), one whose bytes were lost (unreadable: taken over, ``Lease``), or a
released claim back again (its holder is gone: stale). Renewals and takeovers stay
durable.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

from ..storage import Storage
from .layout import claim_name
from .lease import HolderFields, HolderJudge, Lease, LeaseHolder, lease_ttl


@dataclass(frozen=True)
class ClaimTicket:
    """What a writer of one shard needs of its claim: the epoch its names carry, and the
    claim (key, owner) to check before each record write."""

    epoch: int
    key: str
    owner: str


class ShardClaims:
    """The claims this process holds on the shards of one run, renewed by ONE thread (a node
    may hold many claims), which also releases done shards off the caller's thread.

    ``fields`` go into every claim file (node rank, Ray node: what ``shardwright status``
    shows of who holds which shard); ``judge`` sees holders dead that only the caller can
    (see :class:`Lease`).
    """

    def __init__(self, storage: Storage, fields: HolderFields | None = None, judge: HolderJudge | None = None):
        self.storage = storage
        self.fields = fields or HolderFields()
        self.judge = judge
        self.held: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._to_release: list[int] = []
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def claim(self, shard: int) -> LeaseHolder | None:
        """Take ``shard``'s claim: None on success (or when already held here), else the live
        holder's record (another process works on the shard)."""
        if shard in self.held:
            return None
        lease = Lease(
            self.storage,
            claim_name(shard),
            f"shard {shard}",
            replace(self.fields, shard=shard),
            self.judge,
            durable=False,
        )
        holder = lease.try_acquire()
        if holder is not None:
            return holder
        with self._lock:
            self.held[shard] = lease
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew_all, name="shard-claims", daemon=True)
                self._thread.start()
        return None

    def ticket(self, shard: int) -> ClaimTicket:
        lease = self.held[shard]
        return ClaimTicket(lease.epoch, lease.key, lease.owner)

    def lost(self) -> str | None:
        """Why a claim of ours was taken over (its heartbeat found another owner), or None."""
        with self._lock:
            leases = list(self.held.items())
        for shard, lease in leases:
            if lease.lost:
                return f"the claim on shard {shard} was taken over by another run"
        return None

    def show_current_inputs(
        self,
        current: list[int],
        names: list[str] | None = None,
        states: list[str] | None = None,
        calls: list[int] | None = None,
    ) -> None:
        """Published by each claim's next heartbeat: the input each worker is on (its name, its
        last ResumePoint state, its calls in flight)."""
        with self._lock:
            for lease in self.held.values():
                lease.show_current_inputs(current, names, states, calls)

    def release_later(self, shard: int) -> None:
        """Release ``shard``'s claim from the renewing thread (its shard is done): the caller,
        a pool's message loop, must not wait for storage."""
        with self._lock:
            self._to_release.append(shard)
        self._wake.set()

    def release(self, shard: int, *, ask_storage: bool = True) -> bool:
        """False when the store did not answer (see :meth:`Lease.release`)."""
        with self._lock:
            lease = self.held.pop(shard, None)
        return lease.release(ask_storage=ask_storage) if lease is not None else True

    def release_all(self) -> None:
        """Stop renewing and release every claim; once the store fails to answer one release
        (an outage: the run is failing because of it), the rest are only forgotten, so a
        node holding many claims gives up in one short retry budget, not one per claim."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        answered = True
        for shard in list(self.held):
            answered = self.release(shard, ask_storage=answered) and answered

    def _renew_all(self) -> None:
        interval = max(0.5, lease_ttl() / 4)
        next_beat = time.monotonic() + interval
        while not self._closed:
            self._wake.wait(max(0.0, next_beat - time.monotonic()))
            self._wake.clear()
            with self._lock:
                done, self._to_release = self._to_release, []
            for shard in done:
                self.release(shard)
            if self._closed or time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + interval
            with self._lock:
                leases = list(self.held.values())
            for lease in leases:
                if self._closed:  # release_all is waiting: in an outage each renewal takes seconds
                    break
                lease.renew()  # sets lease.lost when another run took it: lost() reports it
