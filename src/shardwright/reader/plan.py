"""Plans and resume points: pure functions over segments (see order.py) and layouts (see
partition.py).

An epoch starts from a *base*: ``None`` for a fresh epoch (the whole sequence S), or the list
of segments a resumed run still has to read. :func:`stream_plans` gives every stream its
segments; :func:`remaining` gives, from how many items each stream has consumed, the segments
nobody has read yet: the base of a resume on any other layout. Segments that only pad a rank
(repeats) are marked and never carried into a resume.
"""

from __future__ import annotations

from .order import Segment
from .partition import Layout, stream_ranges

__all__ = ["StreamPlan", "cut", "drop_front", "length", "merge", "remaining", "stream_plans"]

# A stream's segments, each with True when it only repeats items to pad the rank.
StreamPlan = list[tuple[Segment, bool]]


def length(segments: list[Segment]) -> int:
    return sum(hi - lo for _a, _b, lo, hi in segments)


def cut(segments: list[Segment], start: int, end: int) -> list[Segment]:
    """Positions ``[start, end)`` of the concatenation of ``segments``, as segments."""
    out, pos = [], 0
    for a, b, lo, hi in segments:
        n = hi - lo
        s, e = max(start - pos, 0), min(end - pos, n)
        if s < e:
            out.append((a, b, lo + s, lo + e))
        pos += n
        if pos >= end:
            break
    return out


def drop_front(plan: StreamPlan, count: int) -> StreamPlan:
    """``plan`` without its first ``count`` items."""
    out, left = [], count
    for (a, b, lo, hi), repeat in plan:
        skip = min(left, hi - lo)
        left -= skip
        if lo + skip < hi:
            out.append(((a, b, lo + skip, hi), repeat))
    return out


def merge(segments: list[Segment]) -> list[Segment]:
    """Join neighbours that continue each other (keeps resume states small)."""
    out: list[Segment] = []
    for seg in segments:
        if out and out[-1][:2] == seg[:2] and out[-1][3] == seg[2]:
            out[-1] = (seg[0], seg[1], out[-1][2], seg[3])
        elif seg[2] < seg[3]:
            out.append(seg)
    return out


def stream_plans(total: int, base: list[Segment] | None, layout: Layout) -> list[StreamPlan]:
    """Every stream's plan, rank-major.

    Fresh epoch (``base`` None): a stream's range ``[x, y)`` of S is one segment ``(x, y, 0,
    y - x)``, its windows cut for that stream. Resumed epoch: the range is cut out of ``base``.
    Positions past the end (``pad``) wrap to the start and are marked as repeats.
    """
    size = total if base is None else length(base)
    plans = []
    for x, y in stream_ranges(size, layout):
        plan: StreamPlan = []
        own_end = min(y, size)
        if x < own_end:
            if base is None:
                plan.append(((x, own_end, 0, own_end - x), False))
            else:
                plan.extend((seg, False) for seg in cut(base, x, own_end))
        extra_start = max(x, size)
        while extra_start < y and size:  # pad: wrap around, as often as needed
            s, e = extra_start % size, min(y - extra_start, size - extra_start % size) + extra_start % size
            if base is None:
                plan.append(((s, e, 0, e - s), True))
            else:
                plan.extend((seg, True) for seg in cut(base, s, e))
            extra_start += e - s
        plans.append(plan)
    return plans


def remaining(plans: list[StreamPlan], consumed: list[int]) -> list[Segment]:
    """What no stream has read yet (repeats left out), in stream order."""
    if len(plans) != len(consumed):
        raise ValueError(f"{len(consumed)} consumption counts for {len(plans)} streams")
    out: list[Segment] = []
    for plan, count in zip(plans, consumed):
        out.extend(seg for seg, repeat in drop_front(plan, count) if not repeat)
    return merge(out)
