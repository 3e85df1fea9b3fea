"""The sums behind resume receipts (receipts.py), computed so that a checkpoint costs little.

A receipt's hash is the sum, modulo 2**64, of a 64-bit mix (splitmix64) of each sample id
consumed: the same in any order, and a sample read twice changes it (a XOR would cancel).

Issue 35 asks a checkpoint several times a second to stay under 1 % of the epoch, and a loop
that never saves a state to pay nothing, so nothing here runs per batch; the work is in
``state_dict()``, made small three ways:

- **incremental:** a :class:`ReceiptLedger` (one per loader) keeps, per stream, the receipt of
  the last count it was asked for; the next ``state_dict()`` hashes only the items read since
  (plan positions ``last .. now``), so an epoch hashes each id once however often it saves.
  The samples read before a resume (outside the position's base) are hashed once per base.
- **no shuffle drawn for whole windows:** a sum does not depend on order, so a window read
  whole is hashed from its pieces (runs of consecutive ids); only the window a position stops
  inside is drawn (its order says which of its ids were read).
- **one numpy pass per call:** the ids of a call are gathered into arrays of up to ``_RUN``
  ids and hashed together, instead of one small numpy call per chunk.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .order import EpochSequence, Segment, mixes_items, segment_windows, window_ids
from .plan import StreamPlan, cut
from .state import ResumePoint

__all__ = ["Receipt", "ReceiptLedger", "range_hash", "sum_hash"]

MASK = (1 << 64) - 1
_RUN = 1 << 20  # ids hashed at a time: bounds the temporary arrays (8 bytes an id, a few of them)
_MEMO_LIMIT = 4096  # streams and bases remembered by one ledger (epochs x layouts x streams)


def _mix(ids: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of each id (uint64 arithmetic wraps, as the algorithm wants),
    in place in one copy of ``ids`` (temporaries cost as much as the arithmetic)."""
    z = ids.astype(np.uint64)
    z += np.uint64(0x9E3779B97F4A7C15)
    shifted = z >> np.uint64(30)
    z ^= shifted
    z *= np.uint64(0xBF58476D1CE4E5B9)
    np.right_shift(z, np.uint64(27), out=shifted)
    z ^= shifted
    z *= np.uint64(0x94D049BB133111EB)
    np.right_shift(z, np.uint64(31), out=shifted)
    z ^= shifted
    return z


def sum_hash(ids: np.ndarray) -> int:
    return int(np.sum(_mix(ids), dtype=np.uint64)) if len(ids) else 0


@dataclass(frozen=True)
class Receipt:
    """Samples of one epoch consumed by some streams: ``count`` and ``hash`` (see the module)."""

    count: int
    hash: int

    def __add__(self, other: Receipt) -> Receipt:
        return Receipt(self.count + other.count, (self.hash + other.hash) & MASK)

    def __sub__(self, other: Receipt) -> Receipt:
        return Receipt(self.count - other.count, (self.hash - other.hash) & MASK)

    def to_json(self) -> dict:
        return {"count": self.count, "hash": f"{self.hash:016x}"}

    @classmethod
    def from_json(cls, data: Any) -> Receipt:
        return cls(int(data["count"]), int(data["hash"], 16))


NONE = Receipt(0, 0)


class _Hasher:
    """Ids gathered from runs and arrays, hashed ``_RUN`` at a time."""

    def __init__(self) -> None:
        self.count, self.total = 0, 0
        self._parts: list[np.ndarray] = []
        self._pending = 0

    def run(self, first: int, n: int) -> None:
        """The ids ``first .. first + n - 1``."""
        while n > 0:
            take = min(n, _RUN - self._pending)
            self.ids(np.arange(first, first + take, dtype=np.int64))
            first, n = first + take, n - take

    def ids(self, ids: np.ndarray) -> None:
        self._parts.append(ids)
        self._pending += len(ids)
        if self._pending >= _RUN:
            self._flush()

    def _flush(self) -> None:
        if self._parts:
            ids = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
            self.count += len(ids)
            self.total = (self.total + sum_hash(ids)) & MASK
            self._parts, self._pending = [], 0

    def receipt(self) -> Receipt:
        self._flush()
        return Receipt(self.count, self.total)


@functools.lru_cache(maxsize=16)
def range_hash(n: int) -> int:
    """The hash of 0..n-1: an epoch of n samples read exactly once."""
    hasher = _Hasher()
    hasher.run(0, n)
    return hasher.receipt().hash


def _add_pieces(hasher: _Hasher, window: list[tuple[int, int, int]], start: int, end: int) -> None:
    """Positions ``start .. end - 1`` of ``window``'s pieces laid end to end (unmixed)."""
    pos = 0
    for _group, first, length in window:
        s, e = max(start - pos, 0), min(end - pos, length)
        if s < e:
            hasher.run(first + s, e - s)
        pos += length
        if pos >= end:
            return


Windows = tuple[list[list[tuple[int, int, int]]], list[int]]  # a segment's windows, and where each starts


def _windows(seq: EpochSequence, a: int, b: int) -> Windows:
    windows = segment_windows(seq, a, b)
    starts = [0]
    for window in windows:
        starts.append(starts[-1] + sum(length for _g, _s, length in window))
    return windows, starts


def _add_segment(
    hasher: _Hasher, seq: EpochSequence, segment: Segment, windows: Windows, ledger: ReceiptLedger | None
) -> None:
    """The ids :func:`order.iter_segment` yields for ``segment`` (``windows``: its windows)."""
    a, b, lo, hi = segment
    if lo >= hi:
        return
    mixed, (pieces, starts) = mixes_items(seq.spec), windows
    for w in range(max(bisect.bisect_right(starts, lo) - 1, 0), len(pieces)):
        pos, size = starts[w], starts[w + 1] - starts[w]
        if pos >= hi:
            return
        start, end = max(lo - pos, 0), min(hi - pos, size)
        if start < end:
            if mixed and (start or end < size):  # part of a shuffled window: its order says which ids
                drawn = ledger.drawn(seq, a, b, w, pieces[w]) if ledger is not None else None
                hasher.ids((window_ids(seq, a, b, w, pieces[w]) if drawn is None else drawn)[start:end])
            else:  # a whole window (its order does not change the sum), or unshuffled ids
                _add_pieces(hasher, pieces[w], start, end)


def segments_receipt(seq: EpochSequence, segments: list[Segment], ledger: ReceiptLedger | None = None) -> Receipt:
    hasher = _Hasher()
    for segment in segments:
        a, b = segment[:2]
        windows = ledger.windows(seq, a, b) if ledger is not None else _windows(seq, a, b)
        _add_segment(hasher, seq, segment, windows, ledger)
    return hasher.receipt()


class ReceiptLedger:
    """What one loader's earlier receipts summed, so that the next adds only what was read
    since. Pure caching: any answer is the one computed from scratch (a fresh ledger)."""

    def __init__(self) -> None:
        self._streams: dict[tuple, tuple[int, Receipt]] = {}  # (plan, stream) -> (count, receipt)
        self._bases: dict[tuple, Receipt] = {}  # (epoch, base) -> samples outside the base
        self._sequence: tuple[tuple, EpochSequence] | None = None
        self._windows: dict[tuple, Windows] = {}  # (epoch, a, b) -> the windows of S[a:b]
        # the shuffled window the last receipt stopped inside: the next one starts there
        self._drawn: tuple[tuple, np.ndarray] | None = None

    def sequence(self, view: Any, epoch: int) -> EpochSequence:
        """``view.epoch_sequence(epoch)``, kept while the epoch and order options stay."""
        key = (epoch, view.order_spec, view.plan_size)
        if self._sequence is None or self._sequence[0] != key:
            self._sequence = (key, view.epoch_sequence(epoch))
        return self._sequence[1]

    def windows(self, seq: EpochSequence, a: int, b: int) -> Windows:
        """The windows of segments over S[a:b] (a stream's: the same at every checkpoint)."""
        key = (seq.epoch, seq.spec, seq.total, a, b)
        known = self._windows.get(key)
        if known is None:
            known = _windows(seq, a, b)
            self._remember(self._windows, key, known)
        return known

    def drawn(self, seq: EpochSequence, a: int, b: int, w: int, window: list[tuple[int, int, int]]) -> np.ndarray:
        """:func:`order.window_ids` of window ``w`` over S[a:b], kept until another is drawn."""
        key = (seq.epoch, seq.spec, seq.total, a, b, w)
        if self._drawn is None or self._drawn[0] != key:
            self._drawn = (key, window_ids(seq, a, b, w, window))
        return self._drawn[1]

    def stream(self, seq: EpochSequence, point: ResumePoint, plan: StreamPlan, stream: int) -> Receipt:
        """The first ``point.consumed[stream]`` items of ``plan`` (stream ``stream`` of ``point``)."""
        count = point.consumed[stream]
        key = (seq.epoch, seq.spec, seq.total, point.base, point.layout, stream)
        done, receipt = self._streams.get(key, (0, NONE))
        if done > count:  # an earlier position of the epoch (a loader restored backwards)
            done, receipt = 0, NONE
        if count > done:
            receipt = receipt + segments_receipt(seq, cut([segment for segment, _repeat in plan], done, count), self)
        self._remember(self._streams, key, (count, receipt))
        return receipt

    def before_base(self, seq: EpochSequence, base: tuple[Segment, ...]) -> Receipt:
        """The samples outside ``base``: read before the resume that cut it."""
        key = (seq.epoch, seq.spec, seq.total, base)
        known = self._bases.get(key)
        if known is None:
            left = segments_receipt(seq, list(base), self)
            known = Receipt(seq.total - left.count, (range_hash(seq.total) - left.hash) & MASK)
            self._remember(self._bases, key, known)
        return known

    @staticmethod
    def _remember(memo: dict, key: tuple, value: Any) -> None:
        if len(memo) >= _MEMO_LIMIT and key not in memo:
            memo.clear()  # another layout or many epochs: start over rather than grow
        memo[key] = value
