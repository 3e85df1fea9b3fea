"""``sources.jsonl``: the lines of JSONL files (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``)
as parsed JSON values.

``len()`` needs each file's line count, so a streaming pass (bounded memory: 8 MB pieces)
counts lines once and notes the byte offset of every :data:`STRIDE`-th line (of the
decompressed stream for compressed files). That *line index* is kept in the run's state
(see :meth:`Source.dump_state`), so a resume does not read the files again. A worker seeks
to the nearest noted offset of an uncompressed file; a compressed file cannot seek, so a
worker reads it from the start once, keeping its stream open as it goes forward.

A line that is not UTF-8 JSON, or longer than :data:`MAX_LINE`, is a
:class:`~shardwright.sources.base.BadRow` naming ``file:line``: that input fails (``on_error``
and retries apply), not the run's start; a long line is skipped whole, so every other line
stays the one row it is. A blank line is no input (a blank :class:`BadRow`: fn is not called,
nothing fails), a UTF-8 byte order mark at the start of a file is ignored, and a file of no
lines is named in a warning (it adds no inputs).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import zlib
from collections.abc import Sequence
from typing import IO, Any, cast

from ..errors import InputsError
from .base import BadRow, Source
from .locate import Located, RangedFile, locate

__all__ = ["JsonlSource", "jsonl"]

STRIDE = 1024  # lines per noted offset and per block a worker parses at a time
PIECE = 8 << 20  # bytes read at a time by the counting pass
MAX_LINE = 64 << 20  # a longer line is refused (bounded memory)
BOM = b"\xef\xbb\xbf"
log = logging.getLogger("shardwright")


def _readline(stream: IO[bytes]) -> bytes | None:
    """The next line, or None for a line longer than MAX_LINE (read to its end in bounded
    pieces, so the line after it is the next row: never a piece of this one)."""
    line = stream.readline(MAX_LINE + 1)
    if len(line) <= MAX_LINE or line.endswith(b"\n"):
        return line
    if line.endswith(b"\r"):  # MAX_LINE bytes ended by CRLF are no longer than by LF (trust round 11)
        end = stream.readline(1)
        if end == b"\n":
            return line + end
        line = end  # more of this line (or its end of file): skipped below
    while line and not line.endswith(b"\n"):
        line = stream.readline(PIECE)
    return None


def _stream(item: Located, buffer: int = PIECE) -> IO[bytes]:
    """The decompressed bytes of a file, streamed through our storage (``buffer`` bytes per
    ranged read)."""
    raw: IO[bytes]
    fd = item.open_local("sources.jsonl")
    if fd is not None:
        raw = os.fdopen(fd, "rb")
    else:
        raw = io.BufferedReader(RangedFile(item.root, item.info.key, item.info.size), buffer)
    key = item.info.key
    if key.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if key.endswith(".zst"):
        import zstandard

        from .zstd_frames import FrameChecked  # a file cut short is an error, not an early end

        checked = cast(IO[bytes], FrameChecked(raw, key))  # a raw stream: what stream_reader reads
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(checked, read_across_frames=True), PIECE)
    return raw


def _damaged_compression(exc: BaseException) -> bool:
    """A compressed stream cut short or damaged (gzip's, zlib's or zstandard's own errors)."""
    return isinstance(exc, (EOFError, gzip.BadGzipFile, zlib.error)) or type(exc).__name__ == "ZstdError"


def _count(item: Located) -> tuple[int, list[int]]:
    """(lines, offset of every STRIDE-th line) of one file, in one streaming pass. A compressed
    file cut short is refused naming it (it was a raw EOFError from gzip)."""
    try:
        return _count_lines(item)
    except Exception as exc:
        if not item.info.key.endswith((".gz", ".zst")) or not _damaged_compression(exc):
            raise
        raise InputsError(
            f"sources.jsonl: {item.name} is not a complete compressed file ({type(exc).__name__}: {exc}): "
            "it was cut short or damaged; restore it, or leave it out of the inputs"
        ) from None


def _count_lines(item: Located) -> tuple[int, list[int]]:
    lines, offsets, position, last = 0, [0], 0, b"\n"
    with _stream(item) as f:
        while True:
            piece = f.read(PIECE)
            if not piece:
                break
            start = 0
            while True:
                newline = piece.find(b"\n", start)
                if newline == -1:
                    break
                lines += 1
                if lines % STRIDE == 0:
                    offsets.append(position + newline + 1)
                start = newline + 1
            position += len(piece)
            last = piece[-1:]
    if last != b"\n":
        lines += 1  # a last line without a newline
    return lines, offsets


def _warn_empty(files: list[Located], index: list[tuple[int, list[int]]]) -> None:
    empty = [item.name for item, (lines, _) in zip(files, index) if lines == 0]
    if empty:
        log.warning(
            "sources.jsonl: %d file(s) have no lines and add no inputs: %s%s",
            len(empty),
            ", ".join(empty[:5]),
            " ..." if len(empty) > 5 else "",
        )


class JsonlSource(Source):
    kind = "jsonl"

    def __init__(self, files: list[Located]):
        super().__init__()
        self._files = files
        self._index: list[tuple[int, list[int]]] | None = None  # per file: lines, offsets
        self._open: tuple[int, int, Any] | None = None  # (file, next line, stream) of a compressed file

    def _ensure_index(self) -> list[tuple[int, list[int]]]:
        if self._index is None:
            self._index = [_count(item) for item in self._files]
            _warn_empty(self._files, self._index)
        return self._index

    def _unit_rows(self) -> Sequence[int]:
        return [lines for lines, _ in self._ensure_index()]

    def _unit_identity(self, unit: int) -> tuple[str, str]:
        item = self._files[unit]
        return item.name, f"{item.info.size}:{item.info.version}"

    def _read_block(self, unit: int, row: int) -> tuple[int, list]:
        lines, offsets = self._ensure_index()[unit]
        first = row // STRIDE * STRIDE
        count = min(STRIDE, lines - first)
        item = self._files[unit]
        if item.info.key.endswith((".gz", ".zst")):
            if self._open is None or self._open[0] != unit or self._open[1] > first:
                if self._open is not None:
                    self._open[2].close()
                self._open = (unit, 0, _stream(item))
            stream = self._open[2]
            for _ in range(first - self._open[1]):
                _readline(stream)
            raw = [_readline(stream) for _ in range(count)]
            self._open = (unit, first + count, stream)
        else:
            with _stream(item, 1 << 20) as stream:
                stream.seek(offsets[first // STRIDE])
                raw = [_readline(stream) for _ in range(count)]
        return first, [self._parse(item, first + k + 1, line) for k, line in enumerate(raw)]

    @staticmethod
    def _parse(item: Located, number: int, line: bytes | None) -> Any:
        where = f"{item.name}:{number}"
        if line is None:
            return BadRow(where, f"longer than the {MAX_LINE >> 20} MB line limit (skipped whole)")
        if number == 1 and line.startswith(BOM):
            line = line[len(BOM) :]  # a byte order mark some editors write: not part of the data
        if not line.strip():
            return BadRow(where, "a blank line", blank=True)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return BadRow(where, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
        try:
            return json.loads(text)
        except ValueError as exc:
            return BadRow(where, f"not valid JSON ({exc})")

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_open"] = None
        return state

    # -- the line index, kept in the run state ------------------------------------------

    def state_name(self) -> str:
        digest = hashlib.blake2b(digest_size=8)
        for item in self._files:
            digest.update(f"{item.name}\0{item.info.size}\0{item.info.version}\n".encode())
        return f"jsonl-index-{digest.hexdigest()}.json"

    def load_state(self, data: bytes) -> bool:
        try:
            index = json.loads(data)
            ok = isinstance(index, list) and len(index) == len(self._files)
            ok = ok and all(
                isinstance(e, list)
                and len(e) == 2
                and type(e[0]) is int
                and e[0] >= 0
                and isinstance(e[1], list)
                and len(e[1]) == e[0] // STRIDE + 1
                and all(type(o) is int and o >= 0 for o in e[1])
                for e in index
            )
        except ValueError:
            ok = False
        if ok:
            self._index = [(e[0], e[1]) for e in index]
        return ok

    def dump_state(self) -> bytes:
        return json.dumps([[lines, offsets] for lines, offsets in self._ensure_index()]).encode()

    def describe(self) -> str:
        return f"jsonl source of {len(self):,} lines in {len(self._files):,} file(s)"


def jsonl(path_or_url_or_list: object, storage_options: dict | None = None) -> JsonlSource:
    """The lines of JSONL files as a lazy sequence of parsed values (dicts, usually).

    A path, URL, glob or list of them; a directory or prefix means its ``*.jsonl``,
    ``*.jsonl.gz`` and ``*.jsonl.zst`` files (recursively), sorted by path. The line index
    ``len()`` needs is built on first use by one streaming pass and kept in the run state.
    """
    files = locate(path_or_url_or_list, storage_options, "**/*.jsonl*", "sources.jsonl")
    for item in files:
        if not item.info.key.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".ndjson")):
            raise InputsError(
                f"sources.jsonl: {item.name} is not a .jsonl, .jsonl.gz or .jsonl.zst file; pass JSONL files only"
            )
    return JsonlSource(files)
