"""Every file and key name of a shardwright output, in one place.

The engine, the reader, the CLI and the tests build names only through this module, so a
layout change is one edit here plus a :data:`PROTOCOL_VERSION` bump (see the rule below).

::

    index.json                                  the published dataset (litdata's format)
    chunk-{gen}-{shard:05d}-{seq:06d}-{content}.bin   chunk files named by their checksum (``.zstd.bin`` when compressed)
    .shardwright/manifest.json                  the run in progress
    .shardwright/format.json                    the sample format claimed by the run's first sample
    .shardwright/shards/{shard:05d}-{seq:06d}-{epoch}.json   one commit round's records of one shard
    .shardwright/progress/{shard:05d}-{epoch}.bin   a shard's work past its last record (see protocol.progress)
    .shardwright/progress/{shard:05d}-{epoch}-{xxh3_128 hex}.seg   items of its buffer (see protocol.segments)
    .shardwright/leases/{name}.json             heartbeat leases (node-{rank}, publish) and shard
                                                claims (shard-{shard:05d}, protocol 5)
    .shardwright/failed/{input:012d}-g{gen}.json     why an input failed (on_error="skip")
    .shardwright/run.json                       the last finished run
    .shardwright/history/{start ns:020d}-{attempt}.json   one file per optimize() call (bounded)
    .shardwright/inputs/{gen:08d}.units         identities of a call's inputs (see protocol.identity)
    .shardwright/inputs/{gen:08d}.json          which of them generation gen put in the dataset
    .shardwright/sources/{name}                 state a source keeps with the run (a JSONL line index)

Versioning rule: :data:`PROTOCOL_VERSION` is written into every manifest and checked when a
run is resumed. Bump it whenever a name here, a record field, or the meaning of a file
changes, so that a shardwright of another version refuses to resume a run it would misread
(finishing the run with the version that started it, or ``mode="overwrite"``, is the way
out). A published dataset (index.json + chunks) is litdata's format and does not depend on it.

History: 1 = first release; 2 = records carry the run id; 3 = one record file per shard per
commit round, flat under ``shards/``; 4 = fencing: every lease acquisition has an epoch,
chunk and record names carry it, records name their predecessor's epoch (``prev_epoch``);
5 = shard claims: every shard is written under its own claim (``leases/shard-{shard}.json``),
whose epoch its chunk and record names carry, so a shard can move to another node (a Ray node
lost) while fencing stays per shard. A protocol-4 run still resumes under 5: its records chain
as before and a new claim's epoch is above theirs (clock assumption); a protocol-4 process
never resumes a protocol-5 manifest (it does not know claims).
6 = chunks are named by their content (the hex of their xxh3_128 checksum) instead of the
writer's epoch (issue 35: two runs of the same call write the same file names; a fenced
writer can only write a name with the holder's very bytes, and on local disk it never replaces
an existing complete copy: ``Storage.write_content_named``); record, progress and lease names
keep the epoch. A protocol-5 run resumes under 6 (its chunks keep their names); a protocol-5
process refuses a protocol-6 manifest (its cleanup would not know the new names as ours).
``progress/`` (issue 32) needs no bump either: it only saves work past a shard's last record,
which a version that ignores it redoes from the records (a generator from its start, skipping
the outputs committed), and an older cleanup leaves it behind harmlessly (a snapshot names its
run id and the record it extends, so no later run ever uses it). Its buffer *segments*
(``.seg``, issue 35) need none either: a version that does not know them refuses the new
snapshot's magic and redoes that work from the records; this version still reads the old
snapshots, which hold their buffer inline.
7 = every record file ends with a checksum of its records (trust round 8), and a run started
under 7 refuses a record file without one (trust round 9: deleting the field made an edited
file look like an older version's, which was still read). A protocol-6 run resumes under 7
(its record files may predate checksums); a protocol-6 process refuses a protocol-7 manifest
(it would add unsealed records to a run that requires the seal).
Record logs (``shards/log-{token}-{n}.jsonl``, issue 36: a worker's record files appended to
one file on local disk) need no bump, for the reason ``progress/`` needs none: a version that
does not know them sees a shorter chain and redoes that work (chunk names come from their
content, and a redone record's newer epoch wins the chain for every reader), and its cleanup
leaves the logs behind, where their run id keeps any later run from using them.
``history/`` (informational, read by nothing in the protocol) needs no bump: older
versions ignore it and their overwrite or cleanup removes it with the rest of the state.
"""

from __future__ import annotations

import re

PROTOCOL_VERSION = 7
# the first protocol whose record files must all carry their checksum (records.seal_records)
SEALED_RECORDS_PROTOCOL = 7
# ... and the mark its run ids carry (trust round 10): the manifest's protocol alone was the
# anchor, and "protocol":7 edited to 6 (one bit) let a record stripped of its checksum pass as
# an older run's. The run id is repeated in every record under its checksum, so a run id edited
# back makes every record another run's: dropped, their work redone, none of it skipped.
SEALED_RUN_ID_PREFIX = "s7-"


def short_run_id(run_id: str | None, missing: str = "") -> str:
    """A run id as status and history show it: its first 8 digits, without the seal mark."""
    return (run_id or missing).removeprefix(SEALED_RUN_ID_PREFIX)[:8]


# manifests this version resumes: protocol 4 wrote under node-lease epochs, which a claim's
# epoch (above them by the clock assumption) continues; 5's chunks named by epoch are kept
# as their records name them, the chunks written after the resume are named by content
RESUMABLE_PROTOCOLS = (4, 5, 6, 7)

INDEX_KEY = "index.json"
STATE_DIR = ".shardwright"
MANIFEST_KEY = f"{STATE_DIR}/manifest.json"
FORMAT_KEY = f"{STATE_DIR}/format.json"
RUN_RECORD_KEY = f"{STATE_DIR}/run.json"
SHARDS_PREFIX = f"{STATE_DIR}/shards/"
LEASES_PREFIX = f"{STATE_DIR}/leases/"
FAILED_PREFIX = f"{STATE_DIR}/failed/"
HISTORY_PREFIX = f"{STATE_DIR}/history/"
CHUNK_PREFIX = "chunk-"
INPUTS_PREFIX = f"{STATE_DIR}/inputs/"
SOURCES_PREFIX = f"{STATE_DIR}/sources/"
PROGRESS_PREFIX = f"{STATE_DIR}/progress/"


def units_key(generation: int) -> str:
    return f"{INPUTS_PREFIX}{generation:08d}.units"


def selection_key(generation: int) -> str:
    return f"{INPUTS_PREFIX}{generation:08d}.json"


def source_state_key(name: str) -> str:
    """State a source keeps with the run (``name`` comes from the source: checked here)."""
    if not name or "/" in name or name.startswith(".") or len(name) > 200:
        raise ValueError(f"invalid source state name {name!r}")
    return f"{SOURCES_PREFIX}{name}"


def chunk_filename(
    generation: int, shard: int, seq: int, compression: str | None, epoch: int | None = None, content: str | None = None
) -> str:
    """Name of chunk ``seq`` of ``shard`` written by run generation ``generation``.

    The protocol (6) passes ``content``, the hex digest of the chunk's stored bytes: the name
    then depends on nothing but what the chunk holds, so two runs of the same call write the
    same names, and a writer fenced out of its claim can only ever write a name the holder
    writes with the very same bytes (see the package docstring, Fencing). Protocols 4 and 5
    named chunks by the writer's lease ``epoch`` (a millisecond stamp); their runs still resume
    and their datasets still read, since records and index.json carry the names as written."""
    # litdata's reader finds the decompressed file by removing f".{compression}" from the name,
    # so a compressed chunk must be named *.zstd.bin while the index says "zstd".
    suffix = ".zstd.bin" if compression is not None and compression.startswith("zstd") else ".bin"
    if content is not None:
        if not _CONTENT.match(content):
            raise ValueError(f"a chunk's content digest must be 16-64 lowercase hex digits, not {content!r}")
        tail = f"-{content}"
    else:
        tail = "" if epoch is None else f"-{epoch}"
    return f"{CHUNK_PREFIX}{generation}-{shard:05d}-{seq:06d}{tail}{suffix}"


_CONTENT = re.compile(r"^[0-9a-f]{16,64}$")


def chunk_generation(filename: str) -> int | None:
    """Generation of one of our chunk names (chunk-{gen}-{shard}-{seq}...), None for others."""
    parts = filename.split("-")
    if len(parts) >= 4 and parts[0] == "chunk":
        try:
            return int(parts[1])
        except ValueError:
            return None
    return None


_OUR_CHUNK = re.compile(r"^chunk-\d+-\d{5,}-\d{6,}(-\d+|-[0-9a-f]{16,64})?(\.zstd)?\.bin$")


def content_named_checksum(filename: str) -> str | None:
    """The hex checksum a protocol-6 chunk name carries (``chunk-0-00003-000001-{hex}.bin``),
    None for other names (protocol 4/5's decimal epoch stamps, litdata's names)."""
    match = _OUR_CHUNK.match(filename)
    tail = match.group(1) if match else None
    if tail is None or not _CONTENT.match(tail[1:]):  # an epoch stamp has 13 digits: never 16-64
        return None
    return tail[1:]


def is_our_chunk_name(key: str) -> bool:
    """A top-level key with the exact shape of a chunk name we write (``chunk-final.bin`` is not)."""
    return bool(_OUR_CHUNK.match(key))


def is_top_level_chunk(key: str) -> bool:
    """A key that could be one of our chunk files (top level, our prefix)."""
    return "/" not in key and key.startswith(CHUNK_PREFIX)


def record_key(shard: int, seq: int, epoch: int) -> str:
    """The record file of the commit round of ``shard`` whose first record is ``seq``, written
    under lease epoch ``epoch`` (so a fenced writer's late file never replaces the new holder's)."""
    return f"{SHARDS_PREFIX}{shard:05d}-{seq:06d}-{epoch}.json"


# A worker's record log (issue 36): on storage that appends in place (local disk) a worker
# appends its rounds' record files to one log of its own instead of writing one file each
# (``protocol.record_log``). The name is the writer's random token and the log's number (a log
# is closed and the next one started past ``record_log.LOG_ROTATE_BYTES``).
_RECORD_LOG_NAME = re.compile(r"^log-([0-9a-f]{16})-(\d{4,9})\.jsonl$")


def record_log_key(token: str, number: int) -> str:
    """Log ``number`` of the writer ``token`` (16 hex digits)."""
    return f"{SHARDS_PREFIX}log-{token}-{number:04d}.jsonl"


def is_record_log_key(key: str) -> bool:
    return key.startswith(SHARDS_PREFIX) and bool(_RECORD_LOG_NAME.match(key[len(SHARDS_PREFIX) :]))


def progress_key(shard: int, epoch: int) -> str:
    """The progress snapshot of ``shard`` written under its claim's ``epoch`` (one per holder:
    a fenced writer's late snapshot never replaces the new holder's)."""
    return f"{PROGRESS_PREFIX}{shard:05d}-{epoch}.bin"


def progress_prefix(shard: int) -> str:
    return f"{PROGRESS_PREFIX}{shard:05d}-"


def snapshot_shard(key: str) -> int | None:
    """The shard whose progress snapshot ``key`` is (None: a buffer segment or another key)."""
    found = _SNAPSHOT_NAME.match(key[len(PROGRESS_PREFIX) :]) if key.startswith(PROGRESS_PREFIX) else None
    return int(found.group(1)) if found else None


def segment_key(shard: int, epoch: int, checksum: str) -> str:
    """A segment of the buffer of the writer of ``shard`` under ``epoch``, named by the
    xxh3_128 hex of its content (protocol.segments)."""
    return f"{PROGRESS_PREFIX}{shard:05d}-{epoch}-{checksum}.seg"


_PROGRESS_NAME = re.compile(r"^\d{5,}-\d{1,16}(\.bin|-[0-9a-f]{32}\.seg)$")
_SNAPSHOT_NAME = re.compile(r"^(\d{5,})-\d{1,16}\.bin$")


# Bounds on the numbers in a record file's name: a hand-made name cannot make a reader
# allocate or loop over absurd ranges.
MAX_SEQ = 10**9
MAX_EPOCH = 10**15  # milliseconds since 1970 (year 33658), or a counter


def parse_record_key(key: str) -> tuple[int, int, int] | None:
    """(shard, first seq, epoch) of a record file key, None for anything else under shards/."""
    if not key.startswith(SHARDS_PREFIX):
        return None
    name = key[len(SHARDS_PREFIX) :]
    if "/" in name or not name.endswith(".json"):
        return None
    parts = name[: -len(".json")].split("-")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 16 for p in parts):
        return None
    shard, seq, epoch = (int(p) for p in parts)
    if seq > MAX_SEQ or epoch > MAX_EPOCH:
        return None
    return shard, seq, epoch


CLAIM_PREFIX = "shard-"


def claim_name(shard: int) -> str:
    """The lease name of ``shard``'s claim (protocol 5): ``leases/shard-{shard:05d}.json``."""
    return f"{CLAIM_PREFIX}{shard:05d}"


def claimed_shard(name: str) -> int | None:
    """The shard of a claim's lease name, None for other leases."""
    rest = name[len(CLAIM_PREFIX) :]
    return int(rest) if name.startswith(CLAIM_PREFIX) and rest.isdigit() and len(rest) <= 6 else None


def lease_key(name: str) -> str:
    return f"{LEASES_PREFIX}{name}.json"


def lease_name(key: str) -> str:
    return key[len(LEASES_PREFIX) : -len(".json")]


def failure_key(input_index: int, generation: int) -> str:
    return f"{FAILED_PREFIX}{input_index:012d}-g{generation}.json"


def parse_failure_key(key: str) -> int | None:
    """The input index of a failure record key, None for anything else."""
    head = key[len(FAILED_PREFIX) :].split("-", 1)[0]
    return int(head) if key.startswith(FAILED_PREFIX) and head.isdigit() else None


_FAILURE_NAME = re.compile(r"^\d{12}-g\d{1,16}\.json$")
_HISTORY_NAME = re.compile(r"^\d{20}-[A-Za-z0-9_-]{1,100}\.json$")
_LEASE_NAME = re.compile(r"^(node-\d{1,9}|publish)\.json$")


_INPUTS_NAME = re.compile(r"^\d{8,12}\.(units|json)$")  # units_key, selection_key
_SOURCE_STATE_NAME = re.compile(r"^[a-z]+-index-[0-9a-f]{16}\.json$")  # a source's state_name()


def is_state_key(key: str) -> bool:
    """A key under ``.shardwright/`` with a name the engine writes (manifest, format, run.json,
    record, failure, history and lease files). Anything else there is not ours: a user's file,
    or another program's state that happens to use a directory of the same name, which
    overwrite and cleanup must never delete."""
    if key in (MANIFEST_KEY, FORMAT_KEY, RUN_RECORD_KEY):
        return True
    if key.startswith(SHARDS_PREFIX):
        return parse_record_key(key) is not None or is_record_log_key(key)
    if key.startswith(INPUTS_PREFIX):
        return bool(_INPUTS_NAME.match(key[len(INPUTS_PREFIX) :]))
    if key.startswith(SOURCES_PREFIX):
        return bool(_SOURCE_STATE_NAME.match(key[len(SOURCES_PREFIX) :]))
    if key.startswith(PROGRESS_PREFIX):
        return bool(_PROGRESS_NAME.match(key[len(PROGRESS_PREFIX) :]))
    for prefix, pattern in (
        (FAILED_PREFIX, _FAILURE_NAME),
        (HISTORY_PREFIX, _HISTORY_NAME),
        (LEASES_PREFIX, _LEASE_NAME),
    ):
        if key.startswith(prefix):
            return bool(pattern.match(key[len(prefix) :]))
    return False
