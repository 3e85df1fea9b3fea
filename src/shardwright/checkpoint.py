"""The commit protocol: what is written, in which order, and why a crash anywhere loses nothing.

Everything lives under ``output_dir`` (a directory or an S3 prefix) and is written through
``Storage``, whose every write is atomic (temp name + rename locally, one PUT on S3):
a reader sees an old version or the new one, never a torn file.

Layout::

    index.json                              published dataset (only when a run is complete)
    chunk-{gen}-{shard}-{seq}.bin           chunk files, litdata's byte format
    .shardwright/manifest.json              the run in progress: identity, fingerprint, settings
    .shardwright/format.json                the sample format fixed by the first sample encoded
    .shardwright/shards/{shard}-{seq}.json  commit records of one round, from chunk seq on (O(1) per commit)
    .shardwright/leases/{name}.json         who is running (heartbeat), so two runs never interleave
    .shardwright/failed/...                 per-item failure records (on_error="skip")
    .shardwright/run.json                   the last finished run's record, for ``status``

Order of writes for one chunk of shard ``s`` (done by the worker that owns ``s``):

    1. chunk file ``chunk-{gen}-{s}-{seq}.bin``      (durable before step 2 starts)
    2. its record, in ``shards/{s}-{first}.json``     = the commit point of that chunk

Workers commit in rounds (workers.ChunkCommitter): the chunk files of every chunk waiting,
then one ``storage.barrier()`` that makes them durable, then one record file per shard for
the round. A record file is durable by the next round's barrier; after a power cut only a
last round's record files can be torn (empty or NUL bytes), and ``load_progress`` drops
those and everything after them in their shard, i.e. those chunks are redone.

The record says which chunk it commits and where the shard resumes: ``next_input`` (first
input whose outputs are not all committed) and ``skip_outputs`` (how many outputs of
``next_input`` are already committed: a chunk may end inside one generator's outputs).
The last record of a shard has ``done: true`` (with or without a chunk).

Crash analysis, per point:
- before 1 completes: nothing was named anywhere; the rerun recomputes from the last record.
- between 1 and 2: an orphan chunk file nobody names; the rerun rewrites the same name
  (atomic replace) and publishing deletes any orphan left of this generation.
- after 2: the record names a chunk that exists (written first, durable), so the rerun starts
  after it; nothing is recomputed that was committed, so nothing is repeated.
- records are never rewritten, so a crash can't tear the resume point: a record exists
  whole or not at all. Records of a shard are numbered 0..n-1 without gaps; a gap or an
  unreadable record is reported as corruption, never skipped over.

Publishing (done once, by whoever holds the ``publish`` lease when every shard is done):

    3. index.json = base chunks (append mode: the dataset as it was when the run started,
       copied into the manifest) + every shard's chunks in shard order.  <- publication point
    4. run.json (state "complete", failed inputs).
    5. orphan chunks of this generation, records and format deleted; manifest.json last.

- crash before 3: the rerun finds the manifest and every shard done: it publishes.
- crash between 3 and 4/5: the manifest is still there; index.json already names chunks of
  this run's generation, so the rerun knows the run was published and only finishes 4-5.
  Step 3 is idempotent anyway (same records -> same chunk list).
- a reader opening the output before 3 finds no index.json: a clear error, never a
  partial dataset.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from .errors import ConcurrentRunError, CorruptStateError
from .format import ChunkEntry
from .storage import Storage

STATE_DIR = ".shardwright"
MANIFEST_KEY = f"{STATE_DIR}/manifest.json"
FORMAT_KEY = f"{STATE_DIR}/format.json"
RUN_RECORD_KEY = f"{STATE_DIR}/run.json"
SHARDS_PREFIX = f"{STATE_DIR}/shards/"
LEASES_PREFIX = f"{STATE_DIR}/leases/"
FAILED_PREFIX = f"{STATE_DIR}/failed/"
INDEX_KEY = "index.json"
PROTOCOL_VERSION = 1


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: ``SHARDWRIGHT_CRASH_AT=name`` dies right here, as a
    power cut would, between two writes of the protocol."""
    if os.environ.get("SHARDWRIGHT_CRASH_AT") == name:
        os._exit(77)


def _dumps(data: dict) -> bytes:
    # compact: with indent, json falls back to its pure-Python encoder (10x slower per record)
    return json.dumps(data, separators=(",", ":")).encode()


def _loads(data: bytes, what: str, storage: Storage, key: str) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptStateError(
            f"{what} {storage.url}/{key} is not valid JSON ({exc}); it was damaged or edited by hand. "
            "Restore it, or rerun with mode='overwrite' to start over"
        ) from None
    if not isinstance(value, dict):
        raise CorruptStateError(f"{what} {storage.url}/{key} is not a JSON object; rerun with mode='overwrite'")
    return value


def _field(record: dict, name: str, kind: type | tuple, what: str, where: str):
    value = record.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptStateError(
            f"{what} {where} has a missing or invalid '{name}' ({value!r}); it was damaged or edited by hand. "
            "Delete the output's .shardwright/ folder and rerun with mode='overwrite' to start over"
        )
    return value


# --- records ---------------------------------------------------------------------------------


def _failed_pairs(value, what: str, where: str) -> tuple:
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and x >= 0 for x in p) for p in value
    ):
        raise CorruptStateError(
            f"{what} {where} has an invalid 'failed' list; it was damaged or edited by hand. "
            "Rerun with mode='overwrite' to start over"
        )
    return tuple(tuple(p) for p in value)


def record_key(shard: int, seq: int) -> str:
    return f"{SHARDS_PREFIX}{shard:05d}-{seq:06d}.json"


@dataclass(frozen=True)
class CommitRecord:
    """The commit of one chunk (or of a shard's end) of one shard."""

    shard: int
    seq: int
    chunk: ChunkEntry | None
    stored_bytes: int  # size of the chunk file as stored (compressed), 0 without a chunk
    first_input: int  # input that produced the chunk's first item (for messages)
    next_input: int
    skip_outputs: int
    done: bool
    failed: tuple = ()  # [input id, outputs already committed] of inputs skipped since the previous record
    run_id: str = ""  # the manifest's: a record of another run is a leftover, never a commit of this one

    def to_json(self) -> dict:
        # by hand: dataclasses.asdict deep-copies, and this runs once per chunk
        return {
            "shard": self.shard, "seq": self.seq, "chunk": self.chunk.to_json() if self.chunk else None,
            "stored_bytes": self.stored_bytes, "first_input": self.first_input, "next_input": self.next_input,
            "skip_outputs": self.skip_outputs, "done": self.done, "failed": [list(p) for p in self.failed],
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> "CommitRecord":
        what = "checkpoint record"
        chunk = data.get("chunk")
        try:
            entry = ChunkEntry.from_json(chunk) if chunk is not None else None
        except Exception:
            raise CorruptStateError(
                f"{what} {where} has an invalid 'chunk'; it was damaged or edited by hand. "
                "Rerun with mode='overwrite' to start over"
            ) from None
        return cls(
            shard=_field(data, "shard", int, what, where),
            seq=_field(data, "seq", int, what, where),
            chunk=entry,
            stored_bytes=_field(data, "stored_bytes", int, what, where),
            first_input=_field(data, "first_input", int, what, where),
            next_input=_field(data, "next_input", int, what, where),
            skip_outputs=_field(data, "skip_outputs", int, what, where),
            done=_field(data, "done", bool, what, where),
            failed=_failed_pairs(data.get("failed", []), what, where),
            run_id=_field(data, "run_id", str, what, where),
        )


def write_records(storage: Storage, records: list[CommitRecord]) -> None:
    """Step 2 of the protocol for one commit round: one file per shard holding the round's
    consecutive records of that shard, named by the first one's seq. Callers must have made
    the records' chunks durable first (``storage.barrier()``); the files become durable at
    the next barrier. A round of many small chunks costs one file, not one per chunk."""
    runs: list[list[CommitRecord]] = []
    for record in records:
        if runs and runs[-1][-1].shard == record.shard and runs[-1][-1].seq + 1 == record.seq:
            runs[-1].append(record)
        else:
            runs.append([record])
    for run in runs:
        body = _dumps({"records": [r.to_json() for r in run]})
        storage.write_bytes(record_key(run[0].shard, run[0].seq), body, durable=False)


def _torn(data: bytes) -> bool:
    """What a power cut leaves of a file whose data never reached the disk."""
    return not data.strip(b"\0")


@dataclass
class ShardProgress:
    """What the records of one shard say: its chunks so far and where to resume."""

    shard: int
    start: int
    end: int
    records: list[CommitRecord] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return bool(self.records) and self.records[-1].done

    @property
    def next_seq(self) -> int:
        return len(self.records)

    @property
    def next_input(self) -> int:
        return self.records[-1].next_input if self.records else self.start

    @property
    def skip_outputs(self) -> int:
        return self.records[-1].skip_outputs if self.records else 0

    @property
    def inputs_done(self) -> int:
        return self.end - self.start if self.done else self.next_input - self.start

    def add(self, record: CommitRecord) -> None:
        self.records.append(record)

    @property
    def chunks(self) -> list[ChunkEntry]:
        return [r.chunk for r in self.records if r.chunk is not None]

    @property
    def failed(self) -> list[list[int]]:
        return [list(pair) for r in self.records for pair in r.failed]


def _record_keys_by_shard(storage: Storage) -> dict[int, list[str]]:
    keys: dict[int, list[str]] = {}
    for key in storage.list(SHARDS_PREFIX):
        name = key[len(SHARDS_PREFIX):]
        parts = name[: -len(".json")].split("-")
        if "/" in name or not name.endswith(".json") or len(parts) != 2:
            continue
        try:
            keys.setdefault(int(parts[0]), []).append(key)
        except ValueError:
            continue
    return keys


def load_progress(storage: Storage, bounds: dict[int, tuple[int, int]], run_id: str | None = None,
                  repair: bool = False) -> dict[int, ShardProgress]:
    """Read the records of the given shards (parallel reads: S3 round trips dominate).

    ``repair=True`` (the process about to resume these shards) deletes torn records and
    every later record of their shard, so that a later run can never mistake one of those
    for a commit after new records with other chunk boundaries are written.

    Records of another run (``run_id``) are leftovers of a cleanup that a crash cut short:
    they can only follow this run's records of the shard (this run rewrote the keys before
    them), and are dropped like torn records."""
    keys_by_shard = _record_keys_by_shard(storage)
    wanted = [(s, k) for s in bounds for k in sorted(keys_by_shard.get(s, []))]

    def read(item: tuple[int, str]) -> tuple[int, str, bytes]:
        shard, key = item
        return shard, key, storage.read_bytes(key)

    progress = {s: ShardProgress(s, *bounds[s]) for s in bounds}
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(read, wanted))
    dropped: dict[int, list[str]] = {}
    for shard, key, data in results:
        where = f"{storage.url}/{key}"
        if shard in dropped or _torn(data):
            # A power cut before this record was durable: it and the shard's later records
            # (same last commit round) never committed; their chunks are simply redone.
            dropped.setdefault(shard, []).append(key)
            continue
        body = _loads(data, "checkpoint record", storage, key)
        listed = body.get("records")
        if not isinstance(listed, list) or not listed or not all(isinstance(r, dict) for r in listed):
            raise CorruptStateError(
                f"checkpoint record {where} has no 'records' list; it was damaged or edited by hand. "
                "Rerun with mode='overwrite' to start over"
            )
        records = [CommitRecord.from_json(r, where) for r in listed]
        if run_id is not None and records[0].run_id != run_id:
            dropped.setdefault(shard, []).append(key)
            continue
        shard_progress = progress[shard]
        for record in records:
            if record.shard != shard or record.seq != shard_progress.next_seq or record.run_id != records[0].run_id:
                raise CorruptStateError(
                    f"checkpoint records of shard {shard} are not numbered 0..n-1 without gaps (at {where}); "
                    "a record was deleted or edited by hand. Rerun with mode='overwrite' to start over"
                )
            if not shard_progress.start <= record.next_input <= shard_progress.end or shard_progress.done:
                raise CorruptStateError(
                    f"checkpoint record {where} points outside its shard or follows the shard's last record; "
                    "it was edited by hand. Rerun with mode='overwrite' to start over"
                )
            shard_progress.add(record)
    if repair:
        for keys in dropped.values():
            for key in reversed(keys):  # highest first: a crash here leaves a prefix, still valid
                storage.delete(key)
    return progress


# --- manifest and run record ------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    """Identity of the run in progress; created once, never rewritten while the run lives."""

    run_id: str
    generation: int  # chunk files of this run are chunk-{generation}-*
    mode: str  # "create" or "append"
    num_inputs: int
    num_shards: int
    inputs: dict  # InputsFingerprint.to_json()
    settings: dict  # what shapes the output; compared on resume
    use_checkpoint: bool
    base_chunks: list  # append mode: ChunkEntry json of the dataset as it was
    base_config: dict | None
    fn_name: str
    created_at: float
    input_ids: list | None = None  # a retry run: the run-wide ids of the inputs it redoes
    input_skips: list | None = None  # ... and how many outputs of each were committed before
    protocol: int = PROTOCOL_VERSION

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict, where: str) -> "Manifest":
        what = "run manifest"
        if data.get("protocol") != PROTOCOL_VERSION:
            raise CorruptStateError(
                f"{what} {where} has protocol {data.get('protocol')!r}, this shardwright writes {PROTOCOL_VERSION}; "
                "finish the run with the shardwright version that started it, or rerun with mode='overwrite'"
            )
        return cls(
            run_id=_field(data, "run_id", str, what, where),
            generation=_field(data, "generation", int, what, where),
            mode=_field(data, "mode", str, what, where),
            num_inputs=_field(data, "num_inputs", int, what, where),
            num_shards=_field(data, "num_shards", int, what, where),
            inputs=_field(data, "inputs", dict, what, where),
            settings=_field(data, "settings", dict, what, where),
            use_checkpoint=_field(data, "use_checkpoint", bool, what, where),
            base_chunks=_field(data, "base_chunks", list, what, where),
            base_config=data.get("base_config"),
            fn_name=_field(data, "fn_name", str, what, where),
            created_at=float(_field(data, "created_at", (int, float), what, where)),
            input_ids=data.get("input_ids"),
            input_skips=data.get("input_skips"),
        ).validated(where)

    def validated(self, where: str) -> "Manifest":
        """Catch hand edits that parse but would publish a wrong dataset."""
        problem = None
        inputs = self.inputs
        if not (isinstance(inputs.get("count"), int) and isinstance(inputs.get("block_size"), int)
                and isinstance(inputs.get("block_hashes"), str)):
            problem = "its inputs fingerprint is incomplete"
        elif self.generation < 0:
            problem = f"generation {self.generation} is negative"
        elif self.input_ids is None and self.num_inputs != inputs["count"]:
            problem = f"num_inputs {self.num_inputs} differs from the fingerprint's {inputs['count']}"
        elif not 1 <= self.num_shards <= max(1, self.num_inputs):
            problem = f"num_shards {self.num_shards} is out of range for {self.num_inputs} inputs"
        elif self.input_ids is not None and not (
            isinstance(self.input_ids, list) and len(self.input_ids) == self.num_inputs
            and all(isinstance(i, int) and 0 <= i < inputs["count"] for i in self.input_ids)
            and isinstance(self.input_skips, list) and len(self.input_skips) == self.num_inputs
        ):
            problem = "its retry input list is invalid"
        elif not all(k in self.settings for k in ("chunk_size", "chunk_bytes", "compression")):
            problem = "its settings are incomplete"
        if problem:
            raise CorruptStateError(
                f"run manifest {where} is invalid ({problem}); it was damaged or edited by hand. "
                "Rerun with mode='overwrite' to start over"
            )
        return self

    def shard_bounds(self) -> dict[int, tuple[int, int]]:
        from .planning import shard_bounds

        return {s: shard_bounds(self.num_inputs, self.num_shards, s) for s in range(self.num_shards)}


def read_manifest(storage: Storage) -> Manifest | None:
    try:
        data = storage.read_bytes(MANIFEST_KEY)
    except FileNotFoundError:
        return None
    return Manifest.from_json(_loads(data, "run manifest", storage, MANIFEST_KEY), f"{storage.url}/{MANIFEST_KEY}")


def create_manifest(storage: Storage, manifest: Manifest) -> Manifest:
    """Create the manifest unless one exists (several nodes may start at once): returns the one
    that won, which callers compare with theirs."""
    if storage.create_exclusive(MANIFEST_KEY, _dumps(manifest.to_json())):
        return manifest
    existing = read_manifest(storage)
    if existing is None:  # deleted between our attempt and the read: a finished run; try again
        return create_manifest(storage, manifest)
    return existing


def read_run_record(storage: Storage) -> dict | None:
    try:
        data = storage.read_bytes(RUN_RECORD_KEY)
    except FileNotFoundError:
        return None
    return _loads(data, "run record", storage, RUN_RECORD_KEY)


def write_run_record(storage: Storage, record: dict) -> None:
    storage.write_bytes(RUN_RECORD_KEY, _dumps(record))


# --- failed items (on_error="skip") ----------------------------------------------------------


@dataclass(frozen=True)
class FailureRecord:
    """Details of one input that failed every attempt in one run (one file per input and run).

    Informational: which inputs failed is committed by the commit records' ``failed`` lists
    (so a failure is counted once, with the chunk that follows it); these files carry the why.
    """

    input_index: int
    input_repr: str
    exception_type: str
    message: str
    traceback: str
    host: str
    pid: int
    node: int
    attempts: int
    generation: int
    time: float

    def key(self) -> str:
        return f"{FAILED_PREFIX}{self.input_index:012d}-g{self.generation}.json"


def write_failure(storage: Storage, record: FailureRecord) -> None:
    storage.write_bytes(record.key(), _dumps(asdict(record)))


def _forget_resolved_failures(storage: Storage, still_failed: set[int]) -> None:
    """Detail records of inputs that no longer fail (a retry or a resume succeeded) go."""
    for key in storage.list(FAILED_PREFIX):
        try:
            index = int(key[len(FAILED_PREFIX):].split("-", 1)[0])
        except ValueError:
            continue
        if index not in still_failed:
            storage.delete(key)


# --- sample format shared by all workers ---------------------------------------------------


def _read_format_versioned(storage: Storage) -> tuple[dict, str] | None:
    current = storage.read_versioned(FORMAT_KEY)
    if current is None:
        return None
    record = _loads(current[0], "format record", storage, FORMAT_KEY)
    where = f"{storage.url}/{FORMAT_KEY}"
    _field(record, "data_format", list, "format record", where)
    _field(record, "input_index", int, "format record", where)
    return record, current[1]


def read_format(storage: Storage, run_id: str) -> dict | None:
    """The format claimed in this run, or None (a leftover claim of another run is ignored)."""
    current = _read_format_versioned(storage)
    if current is None or current[0].get("run_id") != run_id:
        return None
    return current[0]


def claim_format(storage: Storage, run_id: str, data_format: list, data_spec: str | None, input_index: int) -> dict:
    """The first sample encoded anywhere in the run fixes the dataset's format; returns the winner's."""
    record = {"data_format": data_format, "data_spec": data_spec, "input_index": input_index, "run_id": run_id}
    while True:
        if storage.create_exclusive(FORMAT_KEY, _dumps(record)):
            return record
        current = _read_format_versioned(storage)
        if current is None:
            continue  # deleted in between: try again
        existing, version = current
        if existing.get("run_id") == run_id:
            return existing
        if storage.replace_if_version(FORMAT_KEY, _dumps(record), version):  # a leftover of another run
            return record


# --- leases: one live owner per node share, and one publisher -------------------------------


def lease_ttl() -> float:
    return float(os.environ.get("SHARDWRIGHT_LEASE_TTL", "30"))


def pid_alive(pid: int) -> bool:
    """Whether a process of this host still exists (for stale leases and temp files)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _dead_reason(holder: dict) -> str | None:
    """Why a lease holder is certainly gone (whoever looks), or None."""
    age = time.time() - float(holder.get("heartbeat", 0))
    if age > float(holder.get("ttl", lease_ttl())):
        return f"its last heartbeat was {age:.0f} s ago"
    if holder.get("host") == socket.gethostname() and not pid_alive(int(holder.get("pid", -1))):
        return "its process is gone"
    return None


def _slurm_identity() -> str | None:
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return f"{job}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}_{os.environ.get('SLURM_PROCID', '0')}"


class Lease:
    """A heartbeat-renewed claim on ``leases/{name}.json``, taken with conditional writes.

    A lease is stale (and may be taken over) when its heartbeat is older than the TTL, when
    its holder was on this host and its pid is gone, or when it was held by this same Slurm
    array task before a requeue (Slurm only restarts a task after killing the old one).
    """

    def __init__(self, storage: Storage, name: str, what: str, extra: dict | None = None):
        self.storage = storage
        self.key = f"{LEASES_PREFIX}{name}.json"
        self.extra = extra or {}
        self.what = what
        self.owner = uuid.uuid4().hex
        self._version: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None  # set by the heartbeat when another run took the lease

    def _body(self) -> bytes:
        return _dumps(
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "slurm": _slurm_identity(),
                "heartbeat": time.time(),
                "ttl": lease_ttl(),
                **self.extra,
            }
        )

    def _stale_reason(self, holder: dict) -> str | None:
        dead = _dead_reason(holder)
        if dead is not None:
            return dead
        if holder.get("host") == socket.gethostname() and holder.get("pid") == os.getpid():
            return "it is this process's own (an earlier call that did not release it)"
        slurm = _slurm_identity()
        if slurm is not None and holder.get("slurm") == slurm:
            return "it belongs to this same Slurm task before its requeue"
        return None

    def try_acquire(self) -> dict | None:
        """Take the lease; None on success, else the live holder's record."""
        while True:
            if self.storage.create_exclusive(self.key, self._body()):
                self._version = self._current_version()
                return None
            current = self.storage.read_versioned(self.key)
            if current is None:
                continue  # released between our two calls
            data, version = current
            try:
                holder = json.loads(data)
            except ValueError:
                holder = {}
            if holder and self._stale_reason(holder) is None:
                return holder
            if self.storage.replace_if_version(self.key, self._body(), version):
                self._version = self._current_version()
                return None

    def acquire(self, output_url: str) -> None:
        holder = self.try_acquire()
        if holder is not None:
            age = time.time() - float(holder.get("heartbeat", 0))
            raise ConcurrentRunError(
                f"another run is already writing {self.what} of {output_url} (host {holder.get('host')}, "
                f"pid {holder.get('pid')}, heartbeat {age:.0f} s ago); two runs must not interleave. "
                "Wait for it to finish or stop it; a dead run's lease expires "
                f"{float(holder.get('ttl', lease_ttl())):.0f} s after its last heartbeat"
            )
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease-{self.key}", daemon=True)
        self._thread.start()

    def _current_version(self) -> str | None:
        current = self.storage.read_versioned(self.key)
        return current[1] if current else None

    def _heartbeat(self) -> None:
        interval = max(0.5, lease_ttl() / 4)
        while not self._stop.wait(interval):
            try:
                renewed = self._version is not None and self.storage.replace_if_version(
                    self.key, self._body(), self._version
                )
            except Exception:  # a flaky network must not kill the run; the next beat retries
                continue
            if renewed:
                self._version = self._current_version()
            else:
                self.lost = f"the lease on {self.what} was taken over by another run"
                return

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost is None and self._version is not None:
            storage = self.storage.with_short_retries()  # during an outage, don't wait a minute more
            try:
                current = storage.read_versioned(self.key)
                if current is not None and json.loads(current[0]).get("owner") == self.owner:
                    storage.delete(self.key)
            except Exception:
                pass  # the lease expires on its own


def lease_is_live(holder: dict) -> bool:
    """Heartbeat within its TTL, and not a process of this host that is gone."""
    return _dead_reason(holder) is None


def read_leases(storage: Storage, prefix: str = "") -> list[tuple[str, dict]]:
    """(name, holder) of every readable lease."""
    found = []
    for key in storage.list(LEASES_PREFIX + prefix):
        try:
            holder = json.loads(storage.read_bytes(key))
        except (FileNotFoundError, ValueError):
            continue
        found.append((key[len(LEASES_PREFIX):-len(".json")], holder))
    return found


def live_leases(storage: Storage, prefix: str = "node-") -> list[tuple[str, dict]]:
    return [(name, holder) for name, holder in read_leases(storage, prefix) if lease_is_live(holder)]


# --- publishing ---------------------------------------------------------------------------------


def chunk_generation(filename: str) -> int | None:
    """Generation of one of our chunk names (chunk-{gen}-{shard}-{seq}...), None for others."""
    parts = filename.split("-")
    if len(parts) >= 4 and parts[0] == "chunk":
        try:
            return int(parts[1])
        except ValueError:
            return None
    return None


def is_published(index_chunks: list[ChunkEntry], manifest: Manifest) -> bool:
    """True when index.json already holds this run's chunks (a crash between steps 3 and 5).
    A run that produced no chunk can't be told apart, but publishing it again is harmless."""
    return any(chunk_generation(c.filename) == manifest.generation for c in index_chunks)


def run_record(manifest: Manifest, chunks: list[ChunkEntry], failed: list[list[int]]) -> dict:
    """What ``status`` shows of a finished run; ``failed_inputs`` is what a later run retries."""
    new = [c for c in chunks if chunk_generation(c.filename) == manifest.generation]
    now = time.time()
    return {
        "failed_inputs": sorted(failed),
        "state": "complete", "run_id": manifest.run_id, "generation": manifest.generation,
        "mode": manifest.mode, "inputs": manifest.inputs, "num_inputs": manifest.num_inputs,
        "settings": manifest.settings, "items": sum(c.chunk_size for c in chunks),
        "items_added": sum(c.chunk_size for c in new), "chunks": len(chunks), "chunks_added": len(new),
        "started_at": manifest.created_at, "finished_at": now, "seconds": now - manifest.created_at,
        "published_by": socket.gethostname(), "fn_name": manifest.fn_name,
    }


def finish_published(storage: Storage, manifest: Manifest, index_chunks: list[ChunkEntry]) -> None:
    """Steps 4-5 after a crash that followed step 3. If run.json of this run was written
    (step 4), records may be partly deleted already, so it is not rewritten from them."""
    previous = read_run_record(storage)
    if previous is not None and previous.get("run_id") == manifest.run_id:
        cleanup_after_publish(storage, manifest, index_chunks, None)
        return
    progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id)
    failed = [i for s in sorted(progress) for i in progress[s].failed]
    cleanup_after_publish(storage, manifest, index_chunks, failed)


def cleanup_after_publish(storage: Storage, manifest: Manifest, index_chunks: list[ChunkEntry],
                          failed: list[int] | None) -> None:
    """Steps 4-5. Safe to repeat: each step is idempotent. ``failed=None``: run.json of this
    run is already written."""
    if failed is not None:
        write_run_record(storage, run_record(manifest, index_chunks, failed))
        _forget_resolved_failures(storage, {pair[0] for pair in failed})
    crash_point("after_run_record")
    named = {c.filename for c in index_chunks}
    for key in storage.list("chunk-"):
        if "/" not in key and chunk_generation(key) == manifest.generation and key not in named:
            storage.delete(key)
    storage.delete_prefix(SHARDS_PREFIX)
    storage.delete(FORMAT_KEY)
    storage.delete(MANIFEST_KEY)  # last: until it is gone, a rerun finishes this cleanup


def wipe(storage: Storage) -> None:
    """mode='overwrite': remove the dataset and every piece of run state (but not run.json's
    history of other files the user keeps in the folder)."""
    storage.delete(INDEX_KEY)
    for key in storage.list(""):
        name = key.rsplit("/", 1)[-1]
        top = key.split("/", 1)[0]
        if "/" not in key and (name.startswith("chunk-") and name.endswith(".bin") or name.endswith("index.json")):
            storage.delete(key)
        elif top == STATE_DIR and not key.startswith(LEASES_PREFIX) and key != MANIFEST_KEY:
            storage.delete(key)
    storage.delete(MANIFEST_KEY)  # last, as in every cleanup


def publish(storage: Storage, manifest: Manifest, progress: dict[int, ShardProgress]) -> list[ChunkEntry]:
    """Step 3: write index.json from the records of every shard. Callers hold the publish lease."""
    from .format import IndexConfig, render_index

    base = [ChunkEntry.from_json(c) for c in manifest.base_chunks]
    records = [r for s in sorted(progress) for r in progress[s].records if r.chunk is not None]
    present = set(storage.list("chunk-"))
    for record in records:
        if record.chunk.filename not in present:
            raise CorruptStateError(
                f"chunk {storage.url}/{record.chunk.filename}, committed by checkpoint record "
                f"{record_key(record.shard, record.seq)}, is missing: it was deleted by hand. "
                "Rerun with mode='overwrite' to start over"
            )
    fmt = read_format(storage, manifest.run_id)
    if fmt is None and manifest.base_config:
        fmt = manifest.base_config
    settings = manifest.settings
    config = IndexConfig(
        chunk_bytes=settings["chunk_bytes"], chunk_size=settings["chunk_size"],
        compression=settings["compression"],
        data_format=list(fmt["data_format"]) if fmt else [], data_spec=fmt["data_spec"] if fmt else None,
        item_loader=settings.get("item_loader", "PyTreeLoader"),
    )
    chunks = base + [r.chunk for r in records]
    storage.barrier()  # chunks written without checkpoints are made durable before being named
    storage.write_bytes(INDEX_KEY, render_index(chunks, config))  # the publication point
    return chunks


def _published_by_another(storage: Storage, manifest: Manifest) -> bool:
    """Publishing writes index.json, then run.json (with the run's id), and only then deletes
    records (the manifest last): whoever sees records vanish sees one of these."""
    previous = read_run_record(storage)
    if previous is not None and previous.get("run_id") == manifest.run_id:
        return True
    current = read_manifest(storage)
    return current is None or current.run_id != manifest.run_id


def publish_if_complete(storage: Storage, manifest: Manifest,
                        known: dict[int, ShardProgress]) -> tuple[bool, list[int]]:
    """Publish when every shard is done (steps 3-5); returns (published, shards still missing).

    ``known`` is what this process already knows (its own shards); the other shards' records
    are read. Whoever gets the ``publish`` lease publishes; a node finishing at the same moment
    sees the lease taken (or the manifest gone) and leaves it to the winner.
    """
    everything = dict(known)
    others = {s: b for s, b in manifest.shard_bounds().items() if s not in known}
    if others:
        try:
            everything.update(load_progress(storage, others, manifest.run_id))
        except (FileNotFoundError, CorruptStateError):
            # A record listed a moment ago is gone (or seems to leave a gap): another node
            # published and its cleanup is deleting the records we are reading.
            if _published_by_another(storage, manifest):
                return True, []
            raise
    missing = sorted(s for s, p in everything.items() if not p.done)
    if missing:
        if _published_by_another(storage, manifest):  # listed after that cleanup deleted them
            return True, []
        return False, missing
    publisher = Lease(storage, "publish", "the final merge")
    if publisher.try_acquire() is not None:
        return False, []
    try:
        current = read_manifest(storage)
        if current is None or current.run_id != manifest.run_id:
            return True, []  # published by a node that finished at the same moment
        chunks = publish(storage, manifest, everything)
        crash_point("after_index")
        failed = [i for s in sorted(everything) for i in everything[s].failed]
        cleanup_after_publish(storage, manifest, chunks, failed)
    finally:
        publisher.release()
    return True, []
