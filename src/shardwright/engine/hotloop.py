"""The worker's hot loop compiled for one format, with the format's encoder inlined (issue 36:
the 200k small dicts row).

Once a run's format is known and has a compiled flat encoder (``format.flat``: a scalar, or
one dict/list/tuple of ``int``/``float``/``bool``/``str``/``bytes`` leaves), the worker runs its
inputs through a loop written for that format (``Worker._run_compiled``). Per input it does
what ``Worker._run_plain`` does, in the same order, with the encoder's statements in the
loop's own body instead of behind a call: the input's position stored in shared memory
(a worker that dies inside fn is reported at its input), the stop look (a flag the worker's
ticker thread sets), fn's call, then the sample checked as fn returned it (a sample fn
mutates afterwards is written as it was) and added to the batch:

- leaves of fixed size only (``int``, ``float``, ``bool``): each leaf appended to its own list
  (``format.packed.LeafColumns``), the batch's block built by numpy when it is handed over:
  no bytes object per item, no ``struct.pack`` call per item. An ``int`` outside int64 is
  found there, and the batch is then replayed item by item (:func:`replay`): the inputs
  before it are kept and the general encoder raises the error that names it, as before;
- other formats (``str``, ``bytes`` leaves): the item bytes packed as the compiled encoder
  packs them, appended to a list.

Measured per item (``benchmarks/bench_hotloop.py``, one process, 400k small dicts): fn alone
88 ns; the loop it replaces 389 (the encoder's call, its second type checks, the loop's own
branches for the format); compiled with bytes per item 330; with leaf columns 251.

Everything else leaves the compiled loop at the input it concerns and is handled by the
worker in plain Python, exactly as before: the stop look and progress (:data:`LOOK`), fn's
exception (:class:`Raised`), a source's bad row (the ``BadRow`` itself), and a sample the
inlined statements do not take (:class:`Returned`: None, a generator, a numpy scalar, a
missing key, another structure), which the general encoder encodes (the same bytes) or
rejects with the error that names the problem. The batch leaves the loop when it holds
``stop - first`` items (fixed-size formats) or ``FLUSH_BYTES`` (others).

The generated source holds only names this module and ``format.flat`` make up; fn, the inputs
and everything the encoder needs are bound as the function's default arguments (local
variables: the fastest lookups CPython has), never written into code.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ..errors import UsageError, short_repr
from ..format.packed import LeafColumns
from ..format.pytree import unflatten_sample
from ..sources import BadRow

__all__ = [
    "FLUSH_BYTES",
    "LOOK",
    "CompiledLoop",
    "Raised",
    "Returned",
    "Segment",
    "int64_view",
    "refuse_async",
    "replay",
]

# The hot loop hands its encoded items to the shard's writer at least this often (and at each
# stop look): a chunk is cut no later than this many bytes past its limit.
FLUSH_BYTES = 1 << 20

# (first input, stop, batch bytes so far) -> (next input, batch bytes, outcome); see CompiledLoop
Segment = Callable[[int, int, int], tuple[int, int, Any]]


class Raised:
    """fn's first call on an input raised this (the hot loop hands it to the retry logic)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class Returned:
    """fn's first call on an input returned this, and the inlined encoder did not take it
    (a generator, None, or a sample for the general encoder)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


class _Look:
    def __repr__(self) -> str:
        return "LOOK"


LOOK = _Look()  # the outcome of a segment that stopped for the stop look, before its input

# The names the generated loop binds, besides the encoder's (flat.flat_encoder_source).
_LOOP_NAMES = (
    "fn",
    "inputs",
    "base",
    "current",
    "wid",
    "look",
    "LOOK",
    "Raised",
    "Returned",
    "BadRow",
    "FLUSH_BYTES",
    "isinstance",
    "type",
    "len",
    "range",
)


class CompiledLoop:
    """The hot loop of one encoder's format: :meth:`bind` gives a shard's :data:`Segment`.

    ``segment(i, stop, nbytes)`` runs inputs ``i``, ``i + 1``, ... below ``stop``, appending
    each one's item bytes to the batch, and returns ``(j, nbytes, outcome)``: ``outcome`` None
    when inputs up to ``j - 1`` are all in the batch (``j == stop``, or the batch reached
    FLUSH_BYTES: ``nbytes`` is its byte count, kept only for formats of variable size);
    otherwise input ``j`` is not in the batch and ``outcome`` says why: :data:`LOOK` (its
    position is stored, fn not called yet), a ``BadRow``, :class:`Raised` or
    :class:`Returned`. An exception that is not an ``Exception`` (KeyboardInterrupt) leaves
    the segment as it came; the shared ``current`` then holds its input."""

    def __init__(self, encoder: Any, source: tuple[list[str], dict[str, Any]], rows: bool, sinks: list[str]):
        self.encoder = encoder  # the encoder this loop was made for (the worker's cache key)
        self.itemsize: int | None = getattr(encoder, "fixed_size", None)
        self.columns = sinks != ["append"]  # the leaves go to a LeafColumns, not item bytes to a list
        lines, namespace = source
        clash = set(namespace) & {*_LOOP_NAMES, *sinks}
        if clash:
            raise AssertionError(f"the encoder's names {sorted(clash)} clash with the hot loop's")
        names = [*_LOOP_NAMES, *sinks, *namespace]
        body = [
            "def bind(" + ", ".join(_LOOP_NAMES[:6]) + ", sinks):",
            f"    {', '.join(sinks)}, = sinks",
            "    def segment(i, stop, nbytes, " + ", ".join(f"{name}={name}" for name in names) + "):",
            "        for i in range(i, stop):",
            "            current[wid] = i",
            "            if look[0]:",
            "                return i, nbytes, LOOK",
            "            value = inputs[i - base]",
        ]
        if rows:  # a source's rows: one that could not be read is a BadRow
            body += ["            if isinstance(value, BadRow):", "                return i, nbytes, value"]
        body += [
            "            try:",
            "                sample = fn(value)",
            "            except (Exception, SystemExit) as exc:",
            "                return i, nbytes, Raised(exc)",
            *(f"            {line}" for line in lines),
            "            return i, nbytes, Returned(sample)",
            "        return stop, nbytes, None",
            "    return segment",
        ]
        scope = {
            **namespace,
            "LOOK": LOOK,
            "Raised": Raised,
            "Returned": Returned,
            "BadRow": BadRow,
            "FLUSH_BYTES": FLUSH_BYTES,
            "isinstance": isinstance,
            "type": type,
            "len": len,
            "range": range,
        }
        exec(compile("\n".join(body), f"<shardwright hot loop {getattr(encoder, 'data_format', '')}>", "exec"), scope)
        self._bind: Callable[..., Segment] = scope["bind"]

    @classmethod
    def build(cls, encoder: Any, rows: bool) -> CompiledLoop | None:
        """The loop of ``encoder``'s format, or None when it has no compiled flat encoder."""
        flat_source = getattr(encoder, "flat_source", None)
        if flat_source is None:
            return None
        if LeafColumns.available and getattr(encoder, "fixed_size", None) is not None:  # one list per leaf
            sinks = [f"C{k}" for k in range(len(encoder.data_format))]
            source = flat_source("sample", [*(f"{sink}(v{k})" for k, sink in enumerate(sinks)), "continue"], False)
            if source is not None:
                return cls(encoder, source, rows, sinks)
        if getattr(encoder, "fixed_size", None) is not None:  # the batch leaves at its item count
            accept = ["append(data)", "continue"]
        else:  # items of any size: the batch leaves at FLUSH_BYTES
            accept = [
                "append(data)",
                "nbytes += len(data)",
                "if nbytes >= FLUSH_BYTES:",
                "    return i + 1, nbytes, None",
                "continue",
            ]
        source = flat_source("sample", accept)
        return None if source is None else cls(encoder, source, rows, ["append"])

    def bind(self, fn, inputs, base: int, current, wid: int, look: list[bool], sinks: tuple) -> Segment:
        """The segment function of one shard: ``inputs[i - base]`` is input ``i``'s value,
        ``current[wid]`` the shared slot of the input being processed, ``sinks`` the batch's
        ``append`` (one) or, for a loop of :attr:`columns`, a ``LeafColumns``' appenders."""
        return self._bind(fn, inputs, base, current, wid, look, sinks)


def refuse_async(result: types.CoroutineType | types.AsyncGeneratorType) -> None:
    """A sync fn (a wrapper, a lambda) returned a coroutine or an async generator: say so, not
    that it cannot be pickled."""
    if isinstance(result, types.CoroutineType):
        result.close()  # never awaited: no "coroutine was never awaited" warning on top
    raise UsageError(
        f"fn returned {type(result).__name__} {short_repr(result)}: it is async, but was not seen as async when the "
        "call started (a wrapper around an async fn?). Pass the async def (or async generator) function itself as fn"
    )


def int64_view(shared: Any) -> Any:
    """A ``memoryview`` of int64 over ``shared`` (a ``multiprocessing`` Array of ``"q"``, the
    pool's slots of the inputs its workers are on), for the hot loop's store before each fn
    call: ~8 ns cheaper than the Array's own item assignment, into the same shared memory.
    ``shared`` itself when it has no such buffer (a list)."""
    try:
        view = memoryview(shared).cast("B").cast("q")
    except TypeError:
        return shared
    return view if len(view) == len(shared) else shared


def replay(columns: LeafColumns, encode: Callable[[Any, int], bytes], data_spec: str, first: int, done: list) -> None:
    """The items of a batch of leaf columns numpy could not convert (an int outside int64),
    one by one in input order into ``done``, as the per-item loop makes them: each sample
    rebuilt from its leaves and given to ``encode`` (the compiled encoder packs it, or the
    general one raises the error that names its input, ``first + len(done)``)."""
    for leaves, data in columns.samples():
        done.append(data if data is not None else encode(unflatten_sample(list(leaves), data_spec), first + len(done)))
