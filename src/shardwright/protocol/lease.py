"""Leases: one live owner per node share of a run, one per shard (its claim), and one publisher."""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import ConcurrentRunError, LeaseLostError
from ..process import host_identity, pid_alive, slurm_identity, slurm_restart_count
from ..storage import Storage
from .jsonio import MAX_LEASE_BYTES, dumps, read_state, read_versioned_state
from .layout import LEASES_PREFIX, lease_key, lease_name

# Owners of the leases this process holds right now. A lease record with this host and pid
# but another owner is a leftover of an earlier call that did not release it; one whose owner
# is here belongs to a live call in another thread of this process, and must be refused.
_held_here: set[str] = set()
_held_lock = threading.Lock()


def lease_ttl() -> float:
    return float(os.environ.get("SHARDWRIGHT_LEASE_TTL", "30"))


MAX_TTL = 7 * 24 * 3600.0  # a lease file claiming a longer TTL was edited by hand

# The way out of a lease over MAX_LEASE_BYTES (trust round 10: the line said "Abandon the run
# with `shardwright clean OUTPUT_DIR`", which discards the committed work). The writer never
# writes one that large (HolderFields.bounded), so it is damaged liveness data, and deleting
# it is what a takeover does: a run still holding it loses it at its next heartbeat or commit
# check and stops, and the commit records, not the lease, carry the work.
TOO_LARGE_FIX = (
    "Delete that one file: a lease holds no work, only which process writes the run; a run still "
    "holding it stops at its next heartbeat, and rerunning the same call takes a new lease and resumes "
    "from the commit records (nothing committed is lost)"
)


def read_lease(storage: Storage, key: str) -> bytes:
    """A lease file's bytes, bounded (FileNotFoundError when missing)."""
    return read_state(storage, key, "lease", MAX_LEASE_BYTES, TOO_LARGE_FIX)


def read_versioned_lease(storage: Storage, key: str) -> tuple[bytes, str] | None:
    """A lease file's bytes and version for a compare-and-swap, bounded (None when missing)."""
    return read_versioned_state(storage, key, "lease", MAX_LEASE_BYTES, TOO_LARGE_FIX)


def number(holder: dict, name: str, default: float) -> float:
    """A number of a lease file, bounded: a hand-edited or damaged field never crashes a
    reader nor keeps a lease alive for ever (anything not a finite number is the default)."""
    value = holder.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) > 1e15:
        return default
    return float(value)


def _optional_int(holder: dict, name: str) -> int | None:
    value = holder.get(name)
    return value if type(value) is int and abs(value) <= 1e15 else None


def _optional_str(holder: dict, name: str) -> str | None:
    value = holder.get(name)
    return value[:1000] if isinstance(value, str) else None


def _texts(value: object, limit: int = 200) -> tuple[str, ...]:
    """A bounded list of short strings from a lease file (anything else: empty)."""
    if not isinstance(value, list):
        return ()
    return tuple(v[:limit] if isinstance(v, str) else "" for v in value[:1024])


@dataclass(frozen=True)
class HolderFields:
    """What a lease's writer says of itself besides who and where it is (owner, host, pid,
    scheduler task, heartbeat: :class:`Lease` writes those): typed, so that no field can
    overwrite another, and every field written is one :class:`LeaseHolder` reads back."""

    node_rank: int | None = None
    num_nodes: int | None = None
    executor: str | None = None  # the node lease of a run another executor drives ("ray")
    current_inputs: tuple[int, ...] = ()  # the input each worker is on (-1: idle)
    current_names: tuple[str, ...] = ()  # their names for people (shardwright.names), "" when unknown
    current_states: tuple[str, ...] = ()  # their last ResumePoint state as JSON, "" when none recorded
    current_calls: tuple[int, ...] = ()  # their calls in flight under fn's Limiter (0: none or not known)
    shard: int | None = None  # a shard claim's shard (protocol 5)
    node_lease: str | None = None  # a claim: the owner of the node lease it was taken under
    ray_node: str | None = None  # a Ray task's node id, job id, node address, task index, host name
    ray_job: str | None = None
    ray_ip: str | None = None
    ray_task: int | None = None
    host_name: str | None = None

    def to_json(self) -> dict:
        out: dict[str, object] = {}
        for name in HOLDER_FIELDS:
            value = getattr(self, name)
            if isinstance(value, tuple):
                if value:
                    out[name] = list(value)
            elif value is not None:
                out[name] = value
        return out

    def bounded(self) -> HolderFields:
        """What a lease may say of the inputs in flight: the first MAX_SHOWN_INPUTS (all a
        reader reads), within LEASE_BODY_BUDGET. 1,024 inputs in flight with 4 KiB ResumePoint
        states came to over MAX_LEASE_BYTES, which every reader, the holder's own check before
        each commit among them, refused; the states, then the names, are left out first."""
        n = MAX_SHOWN_INPUTS
        fields = replace(
            self,
            current_inputs=self.current_inputs[:n],
            current_names=self.current_names[:n],
            current_states=self.current_states[:n],
            current_calls=self.current_calls[:n],
        )
        if len(dumps(fields.to_json())) > LEASE_BODY_BUDGET:
            fields = replace(fields, current_states=())
        if len(dumps(fields.to_json())) > LEASE_BODY_BUDGET:
            fields = replace(fields, current_names=())
        return fields


HOLDER_FIELDS = tuple(HolderFields.__dataclass_fields__)
MAX_SHOWN_INPUTS = 1024  # LeaseHolder.from_json reads no more
LEASE_BODY_BUDGET = MAX_LEASE_BYTES // 4  # the rest of a lease is a few hundred bytes


@dataclass(frozen=True)
class LeaseHolder:
    """A lease file, read. Damaged or missing fields read as their defaults (numbers bounded),
    so a hand-edited lease never crashes a reader nor stays live for ever."""

    owner: str | None = None
    host: str | None = None
    pid: int | None = None
    slurm: str | None = None  # the Slurm task that held it (slurm_identity())
    slurm_restart: int | None = None  # its SLURM_RESTART_COUNT (None: written before it was recorded)
    task: str | None = None  # the scheduler task that held it (task_identity(): Slurm or a Kubernetes index)
    heartbeat: float = 0.0  # time.time() of its last renewal
    ttl: float | None = None  # None: this process's lease_ttl()
    epoch: int = 0
    node_rank: int | None = None
    num_nodes: int | None = None
    current_inputs: tuple[int, ...] = ()  # the input each worker is on (-1: idle)
    current_names: tuple[str, ...] = ()  # their names for people (shardwright.names), "" when unknown
    current_states: tuple[str, ...] = ()  # their last ResumePoint state as JSON, "" when none recorded
    current_calls: tuple[int, ...] = ()  # their calls in flight under fn's Limiter (0: none or not known)
    shard: int | None = None  # a shard claim's shard (protocol 5)
    node_lease: str | None = None  # a claim: the owner of the node lease it was taken under
    ray_node: str | None = None  # a Ray task's node id, job id and node address (executor="ray")
    ray_job: str | None = None
    ray_ip: str | None = None
    executor: str | None = None
    ray_task: int | None = None
    host_name: str | None = None

    @classmethod
    def from_json(cls, data: object, where: str) -> LeaseHolder:
        """``where`` names the file for messages; a lease is never refused (a damaged one is
        simply not live), so nothing is raised."""
        if not isinstance(data, dict):
            return cls()
        inputs = data.get("current_inputs")
        calls = data.get("current_calls")
        ttl = number(data, "ttl", math.inf)  # inf: no usable ttl (number() bounds real values)
        return cls(
            owner=_optional_str(data, "owner"),
            host=_optional_str(data, "host"),
            pid=_optional_int(data, "pid"),
            slurm=_optional_str(data, "slurm"),
            slurm_restart=_optional_int(data, "slurm_restart"),
            task=_optional_str(data, "task"),
            heartbeat=number(data, "heartbeat", 0.0),
            ttl=None if ttl == math.inf else ttl,
            epoch=int(number(data, "epoch", 0)),
            node_rank=_optional_int(data, "node_rank"),
            num_nodes=_optional_int(data, "num_nodes"),
            current_inputs=tuple(v for v in (inputs[:1024] if isinstance(inputs, list) else []) if type(v) is int),
            current_names=_texts(data.get("current_names")),
            current_states=_texts(data.get("current_states"), 4096),
            current_calls=tuple(
                v if type(v) is int and 0 <= v < 2**31 else 0 for v in (calls[:1024] if isinstance(calls, list) else [])
            ),
            shard=_optional_int(data, "shard"),
            node_lease=_optional_str(data, "node_lease"),
            ray_node=_optional_str(data, "ray_node"),
            ray_job=_optional_str(data, "ray_job"),
            ray_ip=_optional_str(data, "ray_ip"),
            executor=_optional_str(data, "executor"),
            ray_task=_optional_int(data, "ray_task"),
            host_name=_optional_str(data, "host_name"),
        )

    @classmethod
    def parse(cls, raw: bytes, where: str) -> LeaseHolder | None:
        """The holder in a lease file's bytes; None when they are not a JSON object."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # (nested deeper than json goes: not a lease)
            return None
        return cls.from_json(data, where) if isinstance(data, dict) else None

    def heartbeat_age(self) -> float:
        return time.time() - self.heartbeat

    def effective_ttl(self) -> float:
        return min(max(self.ttl if self.ttl is not None else lease_ttl(), 0.0), MAX_TTL)

    def dead_reason(self) -> str | None:
        """Why the holder is certainly gone (whoever looks), or None."""
        age = self.heartbeat_age()
        if age > self.effective_ttl():
            return f"its last heartbeat was {age:.0f} s ago"
        if self.host == host_identity() and not pid_alive(self.pid if self.pid is not None else -1):
            return "its process is gone"
        return None

    def is_live(self) -> bool:
        """Heartbeat within its TTL, and not a process of this host that is gone."""
        return self.dead_reason() is None

    def describe(self, key: str, url: str) -> str:
        """Who holds the lease, for a message; a heartbeat in the future (clock skew, a hand
        edit) says how to clear it, since the lease would otherwise look live until then."""
        age = self.heartbeat_age()
        who = f"host {self.host!s:.100}, pid {self.pid!s:.20}"
        if age < -5:
            return (
                f"{who}, heartbeat {-age:.0f} s in the future (a clock ahead or a hand edit); if no run is "
                f"writing there, delete {url}/{key} (or run `shardwright clean {url}` once it expires)"
            )
        return f"{who}, heartbeat {age:.0f} s ago"


def check_still_held(storage: Storage, key: str, owner: str) -> None:
    """Raise LeaseLostError unless the lease ``key`` still names ``owner``: called before
    each commit-record write, so a writer that was paused past its TTL stops there."""
    if lease_owner(storage, key) != owner:
        raise LeaseLostError(
            f"stopped: the lease {storage.url}/{key} was taken over by another run "
            "(this one was paused or cut off longer than the lease TTL)"
        )


def lease_owner(storage: Storage, key: str) -> str | None:
    """The owner the lease ``key`` names now (None: no readable lease): the ``owner`` that
    :meth:`LeaseHolder.parse` reads, without building the rest of the holder (a worker asks
    before every record write, for its node lease and each shard claim of the round)."""
    try:
        raw = read_lease(storage, key)  # from storage on every call, bounded: never cached
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return _optional_str(data, "owner") if isinstance(data, dict) else None


def _requeued_since(holder: LeaseHolder) -> bool:
    """Whether this process is a later Slurm incarnation of the task that wrote ``holder``. Both
    incarnations share the task's identity, and the earlier one may still run for a while (its
    node cut off, not yet aware its node lease was taken): it must never take the later one's
    leases back, so only a higher restart count takes over. A lease written before the count was
    recorded is taken over as before."""
    return holder.slurm_restart is None or holder.slurm_restart < slurm_restart_count()


def task_identity() -> str | None:
    """The scheduler's task this process is, if its scheduler restarts a task only after the
    previous incarnation is gone: a Slurm array task (requeue), or a Kubernetes Indexed Job's
    index (a pod restarted with the same index; the manifest asks for podReplacementPolicy
    Failed). A lease held by the same task identity is then a leftover of that incarnation."""
    slurm = slurm_identity()
    if slurm is not None:
        return f"slurm:{slurm}"
    host = host_identity()
    return host if host.startswith("k8s:") else None


# A judge of lease holders that only the caller can see dead (a Ray task asks Ray whether the
# holder's node or job is gone): returns why the holder is gone, or None.
HolderJudge = Callable[[LeaseHolder], "str | None"]


def stale_reason(holder: LeaseHolder, judge: HolderJudge | None = None) -> str | None:
    """Why ``holder``'s lease may be taken over by this process, or None (see :class:`Lease`;
    the package docstring's "Who may take a claim over")."""
    dead = holder.dead_reason()
    if dead is not None:
        return dead
    if holder.host == host_identity() and holder.pid == os.getpid():
        return "it is this process's own (an earlier call that did not release it)"
    slurm = slurm_identity()
    if slurm is not None and holder.slurm == slurm and _requeued_since(holder):
        return "it belongs to this same Slurm task before its requeue"
    task = task_identity()
    if task is not None and holder.task == task and (slurm is None or _requeued_since(holder)):
        return f"it belongs to this same task ({task}) before its restart"
    if judge is not None:
        return judge(holder)
    return None


class Lease:
    """A heartbeat-renewed claim on ``leases/{name}.json``, taken with conditional writes.

    A lease is stale (and may be taken over) when its heartbeat is older than the TTL, when
    its holder was on this host and its pid is gone, when it was held by this same scheduler
    task before a restart (Slurm requeue, a pod of the same Job index: the scheduler only
    restarts a task after the old one is gone), or when ``judge`` says its holder is gone (a
    Ray node that Ray reports dead). Fencing keeps a takeover safe even when that holder
    still runs, cut off.
    """

    def __init__(
        self,
        storage: Storage,
        name: str,
        what: str,
        fields: HolderFields | None = None,
        judge: HolderJudge | None = None,
        *,
        durable: bool = True,
    ):
        self.storage = storage
        self.judge = judge
        # False: taken and released without waiting for the disk (a shard claim, see
        # protocol.claims); renewals and takeovers stay durable
        self.durable = durable
        self.key = lease_key(name)
        self.fields = fields or HolderFields()
        self.what = what
        self.owner = uuid.uuid4().hex
        self.epoch = 0  # set when acquired: orders lease holders (fencing, see the package docstring)
        self._version: str | None = None
        self._stop = threading.Event()
        self._renew_lock = threading.Lock()  # the heartbeat and confirm() must not race on _version
        self._thread: threading.Thread | None = None
        self.lost: str | None = None  # set by the heartbeat when another run took the lease

    def _body(self) -> bytes:
        return dumps(
            {
                "owner": self.owner,
                "host": host_identity(),
                "pid": os.getpid(),
                "slurm": slurm_identity(),
                "slurm_restart": slurm_restart_count(),
                "task": task_identity(),
                "heartbeat": time.time(),
                "ttl": lease_ttl(),
                "epoch": self.epoch,
                **self.fields.bounded().to_json(),
            }
        )

    def show_current_inputs(
        self,
        current: list[int],
        names: list[str] | None = None,
        states: list[str] | None = None,
        calls: list[int] | None = None,
    ) -> None:
        """Published by the next heartbeat (``shardwright status``: which input each worker is
        on, its name for people, and its last ResumePoint state)."""
        self.fields = replace(
            self.fields,
            current_inputs=tuple(current),
            current_names=tuple(names or ()),
            current_states=tuple(states or ()),
            current_calls=tuple(calls or ()),
        )

    def _stale_reason(self, holder: LeaseHolder) -> str | None:
        if holder.host == host_identity() and holder.pid == os.getpid() and holder.dead_reason() is None:
            with _held_lock:
                if holder.owner in _held_here:
                    return None  # a live call in another thread of this process
        return stale_reason(holder, self.judge)

    def _next_epoch(self, holder: LeaseHolder | None) -> int:
        # Above the fenced holder's epoch whatever the clocks say, and above any earlier
        # holder's by the clock assumption (a lease is taken over only TTL after its last
        # heartbeat, and a released lease's holder has stopped writing).
        previous = holder.epoch if holder is not None else 0
        return max(int(time.time() * 1000), previous + 1)

    def try_acquire(self) -> LeaseHolder | None:
        """Take the lease; None on success, else the live holder's record."""
        while True:
            self.epoch = self._next_epoch(None)
            # The write's own version (the store's reply, or a read-back that finds our bytes):
            # a takeover between our write and a later read must not lend us the new holder's.
            written, self._version = self.storage.write_if_version(self.key, self._body(), None, durable=self.durable)
            if written:
                if self._version is None:
                    continue  # taken over at once (we were paused): try again, from the start
                self._mark_held()
                return None
            current = read_versioned_lease(self.storage, self.key)
            if current is None:
                continue  # released between our two calls
            data, version = current
            holder = LeaseHolder.parse(data, f"{self.storage.url}/{self.key}")  # None: damaged, taken over
            if holder is not None and self._stale_reason(holder) is None:
                return holder
            self.epoch = self._next_epoch(holder)
            written, self._version = self.storage.write_if_version(self.key, self._body(), version)
            if written:
                if self._version is None:
                    continue
                self._mark_held()
                return None

    def _mark_held(self) -> None:
        with _held_lock:
            _held_here.add(self.owner)

    def acquire(self, output_url: str) -> None:
        holder = self.try_acquire()
        if holder is not None:
            raise ConcurrentRunError(
                f"another run is already writing {self.what} of {output_url} "
                f"({holder.describe(self.key, output_url)}); two runs must not interleave. "
                "Wait for it to finish or stop it; a dead run's lease expires "
                f"{holder.ttl if holder.ttl is not None else lease_ttl():.0f} s after its last heartbeat"
            )
        self.start_heartbeat()

    def start_heartbeat(self) -> None:
        """Renew the (acquired) lease every TTL/4 until released."""
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease-{self.key}", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        interval = max(0.5, lease_ttl() / 4)
        while not self._stop.wait(interval):
            if not self.renew():
                return

    def renew(self) -> bool:
        """One heartbeat: False once the lease is lost (``lost`` says why); a storage error
        counts as renewed (a flaky network must not kill the run; the next beat retries)."""
        if self.lost is not None:
            return False
        try:
            with self._renew_lock:
                renewed = False
                if self._version is not None:
                    renewed, version = self.storage.write_if_version(self.key, self._body(), self._version)
                    if renewed:
                        self._version = version
                        renewed = version is not None
        except Exception:
            return True
        if not renewed:
            self.lost = f"the lease on {self.what} was taken over by another run"
        return renewed

    def confirm(self) -> None:
        """Renew now, or raise LeaseLostError: called right before publishing, so a run that
        was paused past its TTL learns it before it could write index.json."""
        with self._renew_lock:
            if self.lost is None and self._version is not None:
                written, version = self.storage.write_if_version(self.key, self._body(), self._version)
                if written:
                    self._version = version
                    if version is not None:
                        return
                self.lost = f"the lease on {self.what} was taken over by another run"
        raise LeaseLostError(f"stopped: {self.lost or 'the lease was released'}")

    def release(self, *, ask_storage: bool = True) -> bool:
        """Stop the heartbeat and delete the lease if it is still ours. Idempotent.

        False when the store did not answer (the lease then expires on its own, or is taken
        over at once from our dead pid). ``ask_storage=False``: the caller already saw the
        store fail, so the lease is only forgotten here; one outage must not cost a short
        retry budget per lease held (a node holds several shard claims)."""
        with _held_lock:
            _held_here.discard(self.owner)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        answered = True
        if self.lost is None and self._version is not None and ask_storage:
            storage = self.storage.with_short_retries()  # during an outage, don't wait a minute more
            try:
                # One conditional request where the store has one: deleted only while still at
                # the version our last write made (any takeover since changed it).
                if storage.delete_if_version(self.key, self._version) is None:
                    current = read_versioned_lease(storage, self.key)
                    holder = LeaseHolder.parse(current[0], f"{storage.url}/{self.key}") if current else None
                    if holder is not None and holder.owner == self.owner:
                        storage.delete(self.key, durable=self.durable)
            except Exception:
                answered = False  # the lease expires on its own
        self._version = None  # released: a second call does nothing
        return answered


def read_leases(storage: Storage, prefix: str = "") -> list[tuple[str, LeaseHolder]]:
    """(name, holder) of every readable lease."""
    found = []
    for key in storage.list(LEASES_PREFIX + prefix):
        try:
            holder = LeaseHolder.parse(read_lease(storage, key), f"{storage.url}/{key}")
        except FileNotFoundError:
            continue
        if holder is not None:
            found.append((lease_name(key), holder))
    return found


def live_leases(storage: Storage, prefix: str = "node-") -> list[tuple[str, LeaseHolder]]:
    return [(name, holder) for name, holder in read_leases(storage, prefix) if holder.is_live()]
