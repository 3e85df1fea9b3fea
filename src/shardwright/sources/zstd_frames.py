"""A zstd stream's frames followed as its compressed bytes pass by, so that a file cut short is
an error and not a silent end of data.

``zstandard``'s ``stream_reader`` reports end-of-stream when its input ends, even in the middle
of a frame: a ``.jsonl.zst`` cut in half read as the rows before the cut (trust round 6, case
37). Decompressing with a ``decompressobj`` would tell (its ``eof``), but it has no bound on the
output of one call (a bomb). Instead :class:`FrameChecked` sits between the file and the
decompressor and walks the frame format (RFC 8878: frame header, 3-byte block headers giving
each block's size, optional checksum; skippable frames) over the bytes the decompressor reads:
a few Python steps per block of up to 128 KiB, no decompression. When the file ends anywhere
but at a frame's end it raises EOFError, which the JSONL reader reports as a damaged file.
"""

from __future__ import annotations

import io
from typing import IO

__all__ = ["FrameChecked"]

_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK, _SKIPPABLE = 0xFFFFFFF0, 0x184D2A50
_DICT_ID_SIZES = (0, 1, 2, 4)


class FrameChecked(io.RawIOBase):
    """``raw``'s bytes unchanged; EOFError when ``raw`` ends inside a zstd frame, ValueError when
    its bytes are not zstd frames at all (the decompressor says so too)."""

    def __init__(self, raw: IO[bytes], name: str) -> None:
        super().__init__()
        self._raw, self._name = raw, name
        self._pending = bytearray()  # bytes of a header not complete yet
        self._skip = 0  # bytes of a block body, checksum or skippable frame still to pass
        self._state = "frame"  # frame (at a frame boundary) | header | block | skippable
        self._header_size = 0
        self._checksum = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if not n:
            if self._state != "frame" or self._pending or self._skip:
                raise EOFError(f"{self._name}: the zstd stream ends inside a frame (the file was cut short)")
            return 0
        self._walk(memoryview(buffer)[:n])
        return n

    def _walk(self, data: memoryview) -> None:
        at = 0
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                if not self._skip and self._state == "checksum":
                    self._state = "frame"
                continue
            need = self._need()
            take = min(need - len(self._pending), len(data) - at)
            self._pending += data[at : at + take]
            at += take
            if len(self._pending) == need:
                self._advance(bytes(self._pending))

    def _need(self) -> int:
        """Bytes of the header the walk is reading now."""
        if self._state in ("frame", "skippable"):
            return 8 if self._state == "skippable" else 5  # magic + (size | frame header descriptor)
        if self._state == "header":
            return self._header_size
        return 3  # a block header

    def _advance(self, head: bytes) -> None:
        self._pending.clear()
        if self._state == "frame":
            magic = int.from_bytes(head[:4], "little")
            if magic & _SKIPPABLE_MASK == _SKIPPABLE:
                self._state, self._pending = "skippable", bytearray(head)
                return
            if magic != _MAGIC:
                raise ValueError(f"{self._name}: not a zstd stream (a frame starts with {head[:4].hex()})")
            descriptor = head[4]
            single_segment = descriptor >> 5 & 1
            fcs_sizes = (1 if single_segment else 0, 2, 4, 8)
            # the rest of the frame header: window descriptor, dictionary id, content size
            rest = (0 if single_segment else 1) + _DICT_ID_SIZES[descriptor & 3] + fcs_sizes[descriptor >> 6]
            self._checksum = bool(descriptor >> 2 & 1)
            if rest:
                self._state, self._header_size = "header", rest
            else:
                self._state = "block"
        elif self._state == "skippable":
            self._state, self._skip = "frame", int.from_bytes(head[4:8], "little")
            if not self._skip:
                self._state = "frame"
        elif self._state == "header":
            self._state = "block"
        else:  # a block header: last-block flag, type, size
            value = int.from_bytes(head, "little")
            last, kind, size = value & 1, value >> 1 & 3, value >> 3
            if kind == 3:
                raise ValueError(f"{self._name}: a zstd block of the reserved type (a damaged stream)")
            body = 1 if kind == 1 else size  # an RLE block's body is one byte
            if last:
                self._state = "checksum" if self._checksum else "frame"
                self._skip = body + (4 if self._checksum else 0)
                if not self._skip:
                    self._state = "frame"
            else:
                self._skip = body
