"""Commit records: the commit point of each chunk, and what they say about each shard's progress."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter

import xxhash

from ..errors import CorruptStateError
from ..format import ChunkEntry
from ..storage import Storage
from .hints import START_OVER, naming_output
from .jsonio import MAX_RECORD_FILE_BYTES, loads_object, read_state, require_field
from .layout import MAX_EPOCH, SHARDS_PREFIX, is_record_log_key, parse_record_key, record_key
from .record_log import MAX_RECORD_LOG_BYTES, RecordLog, log_lines

MAX_NUMBER = 2**53  # any count or offset a record may hold (JSON's exact integers)


def failed_pairs(value: object, what: str, where: str) -> tuple:
    """The ``failed`` list of a record: [input id, outputs already committed] pairs."""
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(type(x) is int and 0 <= x <= MAX_NUMBER for x in p) for p in value
    ):
        raise CorruptStateError(
            f"{what} {where} has an invalid 'failed' list; it was damaged or edited by hand. " + START_OVER
        )
    return tuple(tuple(p) for p in value)


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
    epoch: int = 0  # the lease epoch it was written under (fencing, see the package docstring)
    prev_epoch: int | None = None  # the epoch of the shard's record seq-1 it follows (None for seq 0)

    def to_json(self) -> dict:
        # by hand: dataclasses.asdict deep-copies, and this runs once per chunk
        return {
            "shard": self.shard,
            "seq": self.seq,
            "chunk": self.chunk.to_json() if self.chunk else None,
            "stored_bytes": self.stored_bytes,
            "first_input": self.first_input,
            "next_input": self.next_input,
            "skip_outputs": self.skip_outputs,
            "done": self.done,
            "failed": [list(p) for p in self.failed],
            "run_id": self.run_id,
            "epoch": self.epoch,
            "prev_epoch": self.prev_epoch,
        }

    @classmethod
    def from_json(cls, data: dict, where: str) -> CommitRecord:
        plain = _plain_record(data)  # the common record, checked in a few C-level steps
        if plain is not None:
            return plain
        what = "checkpoint record"  # anything else: field by field, naming what is wrong
        chunk = data.get("chunk")
        try:
            entry = ChunkEntry.from_json(chunk) if chunk is not None else None
        except Exception:
            raise CorruptStateError(
                f"{what} {where} has an invalid 'chunk'; it was damaged or edited by hand. " + START_OVER
            ) from None
        prev = data.get("prev_epoch")
        if prev is not None and (type(prev) is not int or not 0 <= prev <= MAX_EPOCH):
            raise CorruptStateError(
                f"{what} {where} has an invalid 'prev_epoch' ({prev!r}); it was edited by hand. " + START_OVER
            )
        record = cls(
            shard=require_field(data, "shard", int, what, where),
            seq=require_field(data, "seq", int, what, where),
            chunk=entry,
            stored_bytes=require_field(data, "stored_bytes", int, what, where),
            first_input=require_field(data, "first_input", int, what, where),
            next_input=require_field(data, "next_input", int, what, where),
            skip_outputs=require_field(data, "skip_outputs", int, what, where),
            done=require_field(data, "done", bool, what, where),
            failed=failed_pairs(data.get("failed", []), what, where),
            run_id=require_field(data, "run_id", str, what, where),
            epoch=require_field(data, "epoch", int, what, where),
            prev_epoch=prev,
        )
        # every number read from disk is bounded before anything sizes or loops by it
        if not all(
            0 <= n <= MAX_NUMBER
            for n in (
                record.seq,
                record.stored_bytes,
                record.first_input,
                record.next_input,
                record.skip_outputs,
                record.epoch,
            )
        ):
            raise CorruptStateError(
                f"{what} {where} holds a negative or absurdly large number; it was edited by hand. {START_OVER}"
            )
        return record


_NUMBERS = itemgetter("shard", "seq", "stored_bytes", "first_input", "next_input", "skip_outputs", "epoch")


def _plain_record(data: dict) -> CommitRecord | None:
    """The record ``data`` holds when every field is present, of its exact type and within
    its bounds, and no input failed; None sends it to the field-by-field check (issue 19:
    publishing re-reads every record, 2,000 of them for 2,000 chunks, and this was most of
    that work). The bounds are the same as the full check's."""
    try:
        numbers = _NUMBERS(data)
        done, run_id, chunk = data["done"], data["run_id"], data["chunk"]
    except (KeyError, TypeError):
        return None
    prev, failed = data.get("prev_epoch"), data.get("failed", [])
    if (
        set(map(type, numbers)) != {int}
        or type(done) is not bool
        or type(run_id) is not str
        or failed != []
        or not (0 <= min(numbers) and max(numbers) <= MAX_NUMBER)
        or (prev is not None and (type(prev) is not int or not 0 <= prev <= MAX_EPOCH))
    ):
        return None
    try:
        entry = ChunkEntry.from_json(chunk) if chunk is not None else None
    except ValueError:
        return None
    shard, seq, stored_bytes, first_input, next_input, skip_outputs, epoch = numbers
    return CommitRecord(
        shard, seq, entry, stored_bytes, first_input, next_input, skip_outputs, done, (), run_id, epoch, prev
    )


def write_records(storage: Storage, records: list[CommitRecord], log: RecordLog | None = None) -> list[str]:
    """Step 3 of the protocol for one commit round: one file per shard holding the round's
    consecutive records of that shard, named by the first one's seq and the writer's epoch
    (with ``log``, the same files appended to the writer's record log: module ``record_log``).
    Callers must have made the records' chunks durable first (``storage.barrier()``); the files
    become durable at the next barrier. Returns, per record, the key holding it (a worker
    reports it with the record: :func:`trusted_progress` says why)."""
    files = _record_files(records)
    if log is not None:
        key = log.append([seal_records([r.to_json() for r in run]) for _, run in files])
        return [key] * len(records)
    for key, run in files:
        storage.write_bytes(key, seal_records([r.to_json() for r in run]), durable=False)
    return [key for key, run in files for _ in run]


def _record_files(records: list[CommitRecord]) -> list[tuple[str, list[CommitRecord]]]:
    """The files :func:`write_records` writes for one round: (key, its records)."""
    runs: list[list[CommitRecord]] = []
    for record in records:
        if runs and runs[-1][-1].shard == record.shard and runs[-1][-1].seq + 1 == record.seq:
            runs[-1].append(record)
        else:
            runs.append([record])
    return [(record_key(run[0].shard, run[0].seq, run[0].epoch), run) for run in runs]


# A record file ends with a checksum of its records' JSON text (trust round 8): a record's
# counts steer the resume, so one digit changed on disk ("next_input":6 read as 8, "done":false
# as true, "skip_outputs":0 as 1) skipped inputs and published the dataset without them, with
# no word. The file stays one JSON object: {"records":[...],"checksum":"xxh3_128:<hex>"}, the
# checksum over the exact bytes of the list. Files written before it carry only "records" and
# are still read (a run resumed across the upgrade); any other shape is damage.
_SEAL_HEAD = b'{"records":'
_SEAL_KEY = b',"checksum":"xxh3_128:'
_SEAL_TAIL = len(_SEAL_KEY) + 32 + 2  # the key, 32 hex digits and '"}'


# One compact encoder for every record file (json.dumps with separators builds a new one per
# call); it holds only its settings, so nothing of one file carries into the next.
_ENCODE_COMPACT = json.JSONEncoder(separators=(",", ":")).encode


def seal_records(records: list[dict]) -> bytes:
    """The bytes of one record file holding ``records`` (see above)."""
    listed = _ENCODE_COMPACT(records).encode()
    return _SEAL_HEAD + listed + _SEAL_KEY + xxhash.xxh3_128_hexdigest(listed).encode() + b'"}'


def _check_seal(data: bytes, where: str) -> None:
    """CorruptStateError when a record file's checksum does not match its records."""
    if not data.endswith(b'"}') or data[-_SEAL_TAIL:-34] != _SEAL_KEY or not data.startswith(_SEAL_HEAD):
        raise CorruptStateError(
            f"checkpoint record {where} has a damaged checksum field; it was damaged on disk or edited by "
            f"hand. {START_OVER}"
        )
    listed = data[len(_SEAL_HEAD) : -_SEAL_TAIL]
    if xxhash.xxh3_128_hexdigest(listed).encode() != data[-34:-2]:
        raise CorruptStateError(
            f"checkpoint record {where} does not match its checksum: it was damaged on disk or edited by hand, "
            f"and its counts cannot be trusted. {START_OVER}"
        )


def is_torn(data: bytes) -> bool:
    """What a power cut leaves of a file whose data never reached the disk."""
    return not data.strip(b"\0")


@dataclass
class ShardProgress:
    """What the records of one shard say: its chunks so far and where to resume."""

    shard: int
    start: int
    end: int
    records: list[CommitRecord] = field(default_factory=list)
    # The keys of the record files that hold exactly ``records``, when this process's workers
    # wrote every one of them and reported each record with its file's key as they committed
    # it; None when any record came from elsewhere (read from storage). See trusted_progress.
    written: set[str] | None = field(default=None, compare=False)

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

    def add(self, record: CommitRecord, file_key: str | None = None) -> None:
        """Append ``record``; ``file_key``: the key of the file our worker wrote it into."""
        if file_key is None:
            self.written = None
        elif not self.records:
            self.written = {file_key}
        elif self.written is not None:
            self.written.add(file_key)
        self.records.append(record)

    @property
    def chunks(self) -> list[ChunkEntry]:
        return [r.chunk for r in self.records if r.chunk is not None]

    @property
    def failed(self) -> list[list[int]]:
        return [list(pair) for r in self.records for pair in r.failed]


def record_keys_by_shard(storage: Storage) -> dict[int, list[str]]:
    """Record file keys under shards/, grouped by shard (foreign names and logs are left out)."""
    return record_listing(storage)[0]


def record_listing(storage: Storage) -> tuple[dict[int, list[str]], list[str]]:
    """One listing of shards/: the record files by shard, and the record logs (record_log)."""
    keys: dict[int, list[str]] = {}
    logs: list[str] = []
    for key in storage.list(SHARDS_PREFIX):
        parsed = parse_record_key(key)
        if parsed is not None:
            keys.setdefault(parsed[0], []).append(key)
        elif is_record_log_key(key):
            logs.append(key)
    return keys, sorted(logs)


@dataclass
class _RecordFile:
    key: str
    seq: int  # its first record's
    epoch: int
    records: list[CommitRecord] | None  # None: torn
    in_log: bool = False  # a line of a record log: never deleted by itself


def _parse_file(storage: Storage, shard: int, key: str, data: bytes, sealed: bool) -> _RecordFile:
    _, seq, epoch = parse_record_key(key) or (shard, 0, 0)
    if is_torn(data):
        return _RecordFile(key, seq, epoch, None)
    records = parse_record_file(data, storage, key, sealed)
    _check_named(records, shard, seq, epoch, f"{storage.url}/{key}", "does not match its name")
    return _RecordFile(key, seq, epoch, records)


def _check_named(records: list[CommitRecord], shard: int, seq: int, epoch: int, where: str, what: str) -> None:
    """The records of one round's file are consecutive records of one shard, one epoch, one run."""
    for k, record in enumerate(records):
        prev_ok = k == 0 or record.prev_epoch == epoch
        if (
            record.shard != shard
            or record.seq != seq + k
            or record.epoch != epoch
            or not prev_ok
            or record.run_id != records[0].run_id
        ):
            raise CorruptStateError(
                f"checkpoint record {where} {what} (shard {shard}, seq {seq + k}, epoch {epoch}); "
                f"it was renamed or edited by hand. {START_OVER}"
            )


def _parse_log(storage: Storage, key: str, data: bytes) -> tuple[list[_RecordFile], bool]:
    """The record files a record log holds (its lines up to a torn one), and whether one was torn."""
    lines, torn = log_lines(data)
    files = []
    for number, line in enumerate(lines, 1):
        where = f"{key} (line {number})"
        records = parse_record_file(line, storage, where, sealed=True)  # a log was never written unsealed
        first = records[0]
        _check_named(records, first.shard, first.seq, first.epoch, f"{storage.url}/{where}", "is not one round's")
        files.append(_RecordFile(where, first.seq, first.epoch, records, in_log=True))
    return files, torn


def _chain(
    progress: ShardProgress, files: list[_RecordFile], url: str, strict: bool = True, log_torn: bool = False
) -> list[str]:
    """Fill ``progress`` with the shard's committed chain; returns the keys of files off it.

    The chain (fencing, see the package docstring): record 0 has no predecessor; record k is,
    among the records numbered k whose ``prev_epoch`` is the epoch of the chain's record k-1,
    the one of the highest epoch (a later lease holder supersedes a fenced one). The chain
    ends at the shard's ``done`` record or where no record follows. Off the chain are:
    records of a superseded (lower) epoch and records after a torn file (a power cut):
    dropped; anything else means a record was deleted or edited by hand: CorruptStateError.
    ``log_torn``: a record log read with these files ended in a torn line (record_log), which
    may have held the records missing before the ones dropped. Lines of a log are never among
    the keys returned (a log is deleted whole, at cleanup)."""
    by_seq: dict[int, list[CommitRecord]] = {}
    for f in files:
        for record in f.records or ():
            by_seq.setdefault(record.seq, []).append(record)
    prev: int | None = None
    while not progress.done:
        candidates = [r for r in by_seq.get(progress.next_seq, ()) if r.prev_epoch == prev]
        if not candidates:
            break
        record = max(candidates, key=lambda r: r.epoch)
        if not progress.start <= record.next_input <= progress.end or record.next_input < progress.next_input:
            raise CorruptStateError(
                f"checkpoint record {url}/{record_key(record.shard, record.seq, record.epoch)} points outside its "
                f"shard or backwards; it was edited by hand. {START_OVER}"
            )
        progress.add(record)
        prev = record.epoch
    on_chain = {(r.seq, r.epoch) for r in progress.records}
    top = max((r.epoch for r in progress.records), default=-1)
    torn = log_torn or any(f.records is None for f in files)
    off = []
    for f in files:
        rest = [r for r in f.records or () if (r.seq, r.epoch) not in on_chain]
        if f.records is not None and not rest:
            continue
        if f.records is None or torn or all(r.epoch < top for r in rest):
            if len(rest) == len(f.records or ()) and not f.in_log:
                off.append(f.key)
            continue
        if not strict:
            # A reader that does not hold the shard (status, a peer checking for publishing)
            # may list a live writer's directory mid-write: a directory listing can miss a file
            # created during it and see a later one. The shard only looks less advanced.
            continue
        raise CorruptStateError(
            f"checkpoint records of shard {progress.shard} do not form one chain 0..n-1 (at {url}/{f.key}): "
            "a record was deleted or edited by hand, or follows the shard's last. " + START_OVER
        )
    return off


def parse_record_file(data: bytes, storage: Storage, key: str, sealed: bool = False) -> list[CommitRecord]:
    """The records of one record file (``{"records": [...]}``, one commit round of one shard).
    Callers check :func:`is_torn` first; anything else unreadable is a CorruptStateError.
    ``sealed``: the run's manifest is of a protocol that writes every record file with its
    checksum (``Manifest.records_sealed``), so a file without one was edited, not written
    by an older version."""
    body = loads_object(data, "checkpoint record", storage, key)
    listed = body.get("records")
    where = f"{storage.url}/{key}"
    if set(body) != {"records"}:  # sealed (every file written since trust round 8), or damaged
        _check_seal(data, where)
    elif sealed:
        # trust round 9: deleting the field made an edited file look like an older version's
        raise CorruptStateError(
            f"checkpoint record {where} has no checksum, though this run writes every record with one: "
            f"it was edited by hand, and its counts cannot be trusted. {START_OVER}"
        )
    if not isinstance(listed, list) or not listed or not all(isinstance(r, dict) for r in listed):
        raise CorruptStateError(
            f"checkpoint record {where} has no 'records' list; it was damaged or edited by hand. "
            "Rerun with mode='overwrite' to start over"
        )
    return [CommitRecord.from_json(r, where) for r in listed]


def read_record_file(storage: Storage, key: str) -> list[CommitRecord] | None:
    """The records of one record file; None when it is torn (a power cut) or unreadable.
    FileNotFoundError when it is gone (a publisher cleaning up)."""
    data = read_state(storage, key, "checkpoint record", MAX_RECORD_FILE_BYTES)
    if is_torn(data):
        return None
    try:
        return parse_record_file(data, storage, key)
    except CorruptStateError:
        return None


def read_record_log(storage: Storage, key: str) -> list[tuple[str, list[CommitRecord]]]:
    """The rounds of a record log (module ``record_log``): (where, its records) per line, up to
    a torn one. FileNotFoundError when it is gone; CorruptStateError when a line is damaged."""
    data = read_state(storage, key, "checkpoint record", MAX_RECORD_LOG_BYTES)
    return [(f.key, f.records or []) for f in _parse_log(storage, key, data)[0]]


def load_progress(
    storage: Storage,
    bounds: dict[int, tuple[int, int]],
    run_id: str | None = None,
    repair: bool = False,
    sealed: bool = False,
) -> dict[int, ShardProgress]:
    """Read the records of the given shards (in parallel on object stores, where round trips
    dominate: Storage.map_requests) and follow each shard's chain (see :func:`_chain`).

    ``repair=True`` (the process about to resume these shards, holding their lease) deletes
    the files off the chain: torn records, the shard's records after them, and records of a
    fenced (superseded) writer, so that none of them can be mistaken for a commit later.

    Records of another run (``run_id``) are leftovers of a cleanup that a crash cut short,
    and are dropped too. ``sealed``: see :func:`parse_record_file` (callers pass their
    manifest's ``records_sealed``)."""
    return _load(storage, bounds, record_listing(storage), run_id, repair, sealed)


def trusted_progress(
    storage: Storage,
    bounds: dict[int, tuple[int, int]],
    known: Mapping[int, ShardProgress],
    run_id: str,
    sealed: bool = False,
) -> tuple[dict[int, ShardProgress], list[int]]:
    """What :func:`load_progress` would read for ``bounds``, taking a shard from ``known`` (what
    this process's workers reported) without reading its files when ONE listing of ``shards/``
    proves storage holds exactly what they wrote, and nothing else: the shard is done, every
    record in ``known`` came from our workers with the key of the file it was written into
    (``ShardProgress.written``), and the shard's record keys listed are exactly those keys.
    Why that is enough is protocol step 4 (the package docstring). Any other shard is read as
    :func:`load_progress` reads it. Returns the progress and the shards taken from ``known``."""
    listing = record_listing(storage)
    keys_by_shard, logs = listing
    # A log holds records of any of its writer's shards: one we did not write (or one of ours
    # gone) leaves no shard provably ours, and every shard is read.
    ours = {key for p in known.values() if p.written is not None for key in p.written}
    logs_ours = set(logs) == {key for key in ours if is_record_log_key(key)}
    taken: dict[int, ShardProgress] = {}
    for shard in bounds:
        mine = known.get(shard)
        if (
            logs_ours
            and mine is not None
            and mine.done
            and mine.written is not None
            and set(keys_by_shard.get(shard, ())) == {key for key in mine.written if not is_record_log_key(key)}
        ):
            taken[shard] = mine
    rest = {s: b for s, b in bounds.items() if s not in taken}
    read = _load(storage, rest, listing, run_id, False, sealed) if rest else {}
    return {s: taken[s] if s in taken else read[s] for s in bounds}, sorted(taken)


def _load(
    storage: Storage,
    bounds: dict[int, tuple[int, int]],
    listing: tuple[dict[int, list[str]], list[str]],
    run_id: str | None,
    repair: bool,
    sealed: bool,
) -> dict[int, ShardProgress]:
    keys_by_shard, logs = listing
    # a log (shard None) is read whole once: its lines go to the shards they are of
    wanted = [(s, k) for s in bounds for k in sorted(keys_by_shard.get(s, []))] + [(None, k) for k in logs]

    def read(item: tuple[int | None, str]) -> tuple[int | None, str, bytes | None]:
        shard, key = item
        limit = MAX_RECORD_FILE_BYTES if shard is not None else MAX_RECORD_LOG_BYTES
        try:
            return shard, key, read_state(storage, key, "checkpoint record", limit)
        except FileNotFoundError:
            if repair and shard is not None:  # only we delete our shards' record files while we hold their lease
                raise
            return shard, key, None  # deleted since the listing: a cleanup (or repair) is running

    results = storage.map_requests(read, wanted)
    try:
        progress, dropped = _follow(storage, bounds, results, run_id, repair, sealed)
    except CorruptStateError as damaged:
        if type(damaged) is not CorruptStateError:
            raise
        raise CorruptStateError(naming_output(str(damaged), storage.url)) from None
    if repair:
        for key in sorted(dropped, reverse=True):  # highest first: a crash here leaves a prefix
            storage.delete(key)
    return progress


def _follow(
    storage: Storage,
    bounds: dict[int, tuple[int, int]],
    results: list[tuple[int | None, str, bytes | None]],
    run_id: str | None,
    repair: bool,
    sealed: bool,
) -> tuple[dict[int, ShardProgress], list[str]]:
    """The shards' chains from the record files and logs read, and the keys of the files off them."""
    files: dict[int, list[_RecordFile]] = {s: [] for s in bounds}
    stale: list[str] = []
    log_torn = False
    for shard, key, data in results:
        if data is None:
            continue
        if shard is None:
            lines, torn = _parse_log(storage, key, data)
            log_torn = log_torn or torn
            for line in lines:
                first = line.records[0] if line.records else None  # a log's lines are never torn
                if first is not None and first.shard in files and run_id in (None, first.run_id):
                    files[first.shard].append(line)  # another run's lines are left to cleanup
            continue
        parsed = _parse_file(storage, shard, key, data, sealed)
        if run_id is not None and parsed.records is not None and parsed.records[0].run_id != run_id:
            stale.append(key)
            continue
        files[shard].append(parsed)
    progress = {s: ShardProgress(s, *bounds[s]) for s in bounds}
    dropped = list(stale)
    for shard, shard_files in files.items():
        dropped += _chain(progress[shard], shard_files, storage.url, strict=repair, log_torn=log_torn)
    return progress, dropped


MAX_RECORD_FILES_COUNTED = 2000


def count_committed_chunks(storage: Storage, limit: int = MAX_RECORD_FILES_COUNTED) -> int | str:
    """Chunks committed by the record files of an unfinished run, for messages ("N chunks are
    checkpointed"). Torn or unreadable files count as nothing; beyond ``limit`` files it says
    "at least N" instead of reading them all."""
    return committed_chunks_and_damage(storage, limit)[0]


def committed_chunks_and_damage(
    storage: Storage, limit: int = MAX_RECORD_FILES_COUNTED, sealed: bool = False
) -> tuple[int | str, str | None]:
    """:func:`count_committed_chunks`, and the message naming the first record file that is
    damaged (not torn) when there is one: `verify` of such a run said "rerun the same optimize
    call to finish it", and only that rerun named the damage (trust round 8, row 43).
    ``sealed``: see :func:`parse_record_file`."""
    keys_by_shard, logs = record_listing(storage)
    keys = sorted(k for keys in keys_by_shard.values() for k in keys)
    if len(keys) + len(logs) > limit:
        return f"at least {len(keys) + len(logs)}", None

    def count(key: str) -> tuple[int, str | None]:
        try:
            if is_record_log_key(key):
                rounds = [records for _, records in read_record_log(storage, key)]
            else:
                data = read_state(storage, key, "checkpoint record", MAX_RECORD_FILE_BYTES)
                rounds = [] if is_torn(data) else [parse_record_file(data, storage, key, sealed)]
        except FileNotFoundError:
            return 0, None
        except CorruptStateError as damaged:
            return 0, naming_output(str(damaged), storage.url)
        return sum(1 for records in rounds for r in records if r.chunk is not None), None

    counted = storage.map_requests(count, keys + logs)
    return sum(n for n, _ in counted), next((d for _, d in counted if d is not None), None)
