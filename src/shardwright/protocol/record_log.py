"""A worker's record log: its commit rounds' record files appended to one file (issue 36).

Where storage appends in place (``Storage.APPENDS``: local disk), a worker's committer does not
write step 3's record file ``shards/{shard}-{first seq}-{epoch}.json`` per round: it appends the
very same bytes (the sealed ``{"records":[...],"checksum":...}`` object, one line) to its own
log ``shards/log-{token}-{n}.jsonl``. Nothing else in the protocol changes: the records, their
checksums, the epochs and the chain are the same, a line is read exactly as the file it
replaces would be, and a round is committed when its line is appended (made durable by the
writer's next barrier, as the file was). Why: a record file is one create, one rename, one
fsync with its directory and, after publishing, one unlink of a file whose blocks are on disk
(0.1 ms each on ext4; 80 of them were most of the checkpoint cost left on a 2M-item run). A
log costs one append per round and one file per worker.

What a log may hold, and how it is read (``lines``):

- Only its writer appends to it: the token is random, and the log is created with O_EXCL
  (a clash picks another token). A process that stops leaves its log; a resumed run
  starts new ones (its records carry its new claim's epochs, so the chain is followed
  exactly as across record files).
- A crash or a power cut can leave only the end of a log incomplete: the last line without
  its newline, or bytes that never reached the disk (zeros, or missing). Such a *torn* line
  ends the log: nothing after it is read. Lines after a torn one can exist only past the
  writer's last barrier (a power cut that wrote a later page and not an earlier one), so
  none of them was durable and none named in a published index; dropping them means
  redoing those rounds, like a torn record file and the records after it.
- A complete line that is not a sealed record file (its checksum does not match, it is not
  JSON) was damaged on disk or edited: CorruptStateError, as for a record file.
- A fenced writer may append late lines with its old epoch; the chain ignores them as it
  ignores a fenced writer's files. A log is never edited or deleted while its run is in
  progress (a resume's repair deletes record files off the chain, never lines of a log:
  the lines it would drop are superseded by higher epochs and stay off the chain);
  cleanup (step 6) deletes the logs with the other record files.
"""

from __future__ import annotations

import os

from ..storage import Storage
from .jsonio import MAX_RECORD_FILE_BYTES
from .layout import record_log_key

# A writer starts its next log once one holds this much: a reader holds a whole log in memory
# (bounded by MAX_RECORD_LOG_BYTES before it reads one).
LOG_ROTATE_BYTES = 8 << 20
# A log holds at most LOG_ROTATE_BYTES of lines and then one more round's file.
MAX_RECORD_LOG_BYTES = LOG_ROTATE_BYTES + MAX_RECORD_FILE_BYTES + 1


class RecordLog:
    """The appending end of one writer's logs (one per worker process, on its sealer thread)."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._token = os.urandom(8).hex()
        self._number = 0
        self._size = 0
        self._created = False

    @property
    def key(self) -> str:
        """The log the next append goes to."""
        return record_log_key(self._token, self._number)

    def append(self, files: list[bytes]) -> str:
        """Append one round's record files (sealed, one line each) in one write; returns the
        key of the log holding them. A failed append leaves this log for a new one: a
        partial line must stay the log's last."""
        data = b"".join(f + b"\n" for f in files)
        if self._created and self._size + len(data) > LOG_ROTATE_BYTES:
            self._next_log()
        for _ in range(8):
            try:
                self.storage.append_bytes(self.key, data, create=not self._created)
                break
            except FileExistsError:  # another writer drew the same token: draw again
                self._token = os.urandom(8).hex()
            except BaseException:
                self._next_log()
                raise
        else:
            raise FileExistsError(f"{self.storage.url}/{self.key}: could not create a record log of a fresh name")
        self._created = True
        self._size += len(data)
        return self.key

    def _next_log(self) -> None:
        if self._created:
            self._number += 1
        self._created, self._size = False, 0


def log_lines(data: bytes) -> tuple[list[bytes], bool]:
    """The complete lines of a log, up to its first torn one (see the module docstring), and
    whether one was torn. Each line is one record file's bytes; the caller parses them."""
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    out: list[bytes] = []
    for line in complete:
        if not line or b"\0" in line:
            return out, True  # bytes that never reached the disk: the log ends here
        out.append(line)
    if tail:  # the last line, cut before its newline
        return out, True
    return out, False
