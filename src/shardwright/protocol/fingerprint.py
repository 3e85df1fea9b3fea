"""The fingerprint of a run's inputs: how a resume knows it was given the same inputs."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from operator import countOf

import numpy as np

from ..errors import InputsError, short_repr
from .int_blocks import int64_values, uniform_blocks

FINGERPRINT_BLOCK = 256  # inputs per hash block: 1M inputs -> 3,907 hashes (62 KB of hex)


_ATOMS = (int, float, str, bytes, bool, type(None))
_ATOM_TYPES = frozenset(_ATOMS)


def canonical(value: object, depth: int = 0) -> object:
    """``value`` with every set and frozenset replaced by a sorted tuple (tagged), so that its
    pickle does not depend on the order string hashing gave the set in this process. Lists,
    tuples and dicts are rebuilt only when they hold a set (dict insertion order is kept: it
    is deterministic). Other objects are left alone: their own pickle decides."""
    kind = type(value)
    if kind in _ATOMS or depth > 50:
        return value
    if kind is set or kind is frozenset:
        items = [canonical(v, depth + 1) for v in value]  # type: ignore[attr-defined]
        return ("__set__", kind.__name__, tuple(sorted(items, key=lambda v: _stable_pickle([v]))))
    if kind is list or kind is tuple:
        items = [canonical(v, depth + 1) for v in value]  # type: ignore[attr-defined]
        if all(a is b for a, b in zip(items, value)):  # type: ignore[call-overload]
            return value
        return kind(items)
    if kind is dict:
        pairs = [(canonical(k, depth + 1), canonical(v, depth + 1)) for k, v in value.items()]  # type: ignore[attr-defined]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items())):  # type: ignore[attr-defined]
            return value
        return ("__dict__", tuple(pairs))
    return value


def value_types(inputs: Sequence) -> frozenset[type] | None:
    """The exact types of the values of a list or range, looked at once (one C-level pass) so
    that the functions over a call's inputs (:meth:`InputsFingerprint.of`,
    :meth:`InputFiles.of`, ``identity.values_hashes``) can take their fast path for the whole
    list instead of checking every block; None for any other sequence, whose values those
    functions look at a block at a time."""
    if type(inputs) is range:
        return frozenset((int,))
    if type(inputs) is list:
        if inputs:  # one type throughout, the usual case: counted, cheaper than a set of them
            first = type(inputs[0])
            if countOf(map(type, inputs[:64]), first) == min(64, len(inputs)):
                if countOf(map(type, inputs), first) == len(inputs):
                    return frozenset((first,))
        return frozenset(map(type, inputs))
    return None


class StablePickler:
    """Pickles without the memo, so equal inputs give equal bytes whether or not they are the
    same object (``[p, p]`` vs ``[p, copy(p)]``); one pickler and buffer reused for many
    values (the fingerprint's blocks, the identities' values). Not thread-safe: one per loop."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._pickler = pickle.Pickler(self._buffer, protocol=4)
        self._pickler.fast = True  # no memo; fails on self-referencing values, handled below

    def dumps(self, value: object) -> bytes:
        self._buffer.seek(0)
        self._buffer.truncate()
        try:
            self._pickler.dump(value)
        except (ValueError, RecursionError):
            return pickle.dumps(value, protocol=4)
        return self._buffer.getvalue()


def _stable_pickle(values: list) -> bytes:
    return StablePickler().dumps(values)


@dataclass(frozen=True)
class InputsFingerprint:
    count: int
    block_size: int
    block_hashes: str  # 16 hex chars per block of ``block_size`` inputs

    @classmethod
    def of(
        cls,
        inputs: Sequence,
        block_size: int = FINGERPRINT_BLOCK,
        *,
        types: frozenset[type] | None = None,
        ints: np.ndarray | None = None,
    ) -> InputsFingerprint:
        """``types``: :func:`value_types` of ``inputs``, if the caller has it (else looked up);
        ``ints``: ``int_blocks.int64_values`` of them, if the caller has it (else made when
        they are all ints): the blocks of ints of one encoding are built without the pickler."""
        if types is None:
            types = value_types(inputs)
        if ints is None:
            ints = int64_values(inputs, types)
        all_plain = types is not None and types <= _ATOM_TYPES
        pickler = StablePickler()
        hashes: list[str | None] = [None] * -(-len(inputs) // block_size)
        if ints is not None and len(ints) == len(inputs):
            _hash_uniform_blocks(hashes, inputs, ints, block_size, pickler)
        for number, known in enumerate(hashes):
            if known is None:
                hashes[number] = _block_hash(inputs, number * block_size, block_size, all_plain, pickler)
        return cls(count=len(inputs), block_size=block_size, block_hashes="".join(hashes))  # type: ignore[arg-type]

    def to_json(self) -> dict:
        return {"count": self.count, "block_size": self.block_size, "block_hashes": self.block_hashes}

    @classmethod
    def from_json(cls, data: dict) -> InputsFingerprint:
        return cls(int(data["count"]), int(data["block_size"]), str(data["block_hashes"]))

    def digest(self) -> str:
        """One short digest of the whole fingerprint: run.json keeps these of every finished run,
        so that an append of inputs an earlier run already added is recognised."""
        return hashlib.blake2b(
            f"{self.count}:{self.block_size}:{self.block_hashes}".encode(), digest_size=8
        ).hexdigest()

    def prefix_of(self, other: InputsFingerprint) -> bool:
        """Whether ``other`` (more inputs) starts with these inputs, as far as whole blocks of
        this fingerprint tell: True only when every block of ``self`` is whole and matches."""
        if other.count <= self.count or other.block_size != self.block_size or self.count % self.block_size:
            return False
        return other.block_hashes.startswith(self.block_hashes) and self.count > 0

    def first_difference(self, other: InputsFingerprint) -> str | None:
        """A sentence saying how ``self`` (the recorded run) differs from ``other``, or None."""
        if self.count != other.count:
            return f"the interrupted run had {self.count:,} inputs, this call has {other.count:,}"
        if self.block_size != other.block_size:
            return "the inputs were fingerprinted differently (another shardwright version)"
        width = 16
        for block in range(len(self.block_hashes) // width):
            piece = slice(block * width, (block + 1) * width)
            if self.block_hashes[piece] != other.block_hashes[piece]:
                first = block * self.block_size
                last = min(first + self.block_size, self.count) - 1
                if first == last:
                    return f"input {first:,} differs"
                return f"an input between {first:,} and {last:,} differs"
        return None


def _block_hash(inputs: Sequence, start: int, block_size: int, all_plain: bool, pickler: StablePickler) -> str:
    """The hash of the inputs ``start..start + block_size``'s pickle (the general path)."""
    block = inputs[start : start + block_size]
    if type(block) is not list:
        block = list(block)
    try:
        # the common case, a block of plain values, needs no canonical copy (a C-level check)
        plain = all_plain or set(map(type, block)) <= _ATOM_TYPES
        data = pickler.dumps(block if plain else [canonical(v) for v in block])
    except Exception as exc:  # pickling errors come in many types
        bad = next((start + k for k, v in enumerate(block) if not _picklable(v)), start)
        raise InputsError(
            f"input {bad:,} ({short_repr(inputs[bad])}) cannot be pickled: {exc}. "
            "Inputs are sent to worker processes, so use picklable values "
            "(ints, str, Path, tuples, dicts)."
        ) from exc
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _hash_uniform_blocks(
    hashes: list[str | None], inputs: Sequence, ints: np.ndarray, block_size: int, pickler: StablePickler
) -> None:
    """Fill ``hashes`` of the blocks ``int_blocks`` builds from ``ints`` (the values of
    ``inputs``), the first block of each batch checked against the pickler's bytes: if one
    differs (another Python's pickle), none is left filled and every block takes the general
    path."""
    blake2b = hashlib.blake2b
    filled: list[np.ndarray] = []
    for numbers, rows in uniform_blocks(ints, block_size):
        first = int(numbers[0]) * block_size
        if rows[0].tobytes() != pickler.dumps(list(inputs[first : first + block_size])):
            for done in filled:
                for number in done.tolist():
                    hashes[number] = None
            return
        width = rows.shape[1]
        flat = rows.reshape(-1).data
        for k, number in enumerate(numbers.tolist()):
            hashes[number] = blake2b(flat[k * width : (k + 1) * width], digest_size=8).hexdigest()
        filled.append(numbers)


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


# --- inputs that are paths to files ----------------------------------------------------------------

MAX_FILE_CHECKS = 1_000_000  # inputs stat()ed per call: beyond, files are not checked (documented)


def _file_path(value: object) -> str | None:
    """The path of an input that names a local file: a Path, or a str with a '/' in it."""
    if isinstance(value, os.PathLike) or (isinstance(value, str) and "/" in value and "://" not in value):
        try:
            path = os.fspath(value)
        except TypeError:
            return None
        return path if isinstance(path, str) else None
    return None


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


@dataclass(frozen=True)
class InputFiles:
    """Size and modification time of the inputs that are paths to existing files, hashed per
    block of inputs: a resume compares them, so a file edited between a crash and the resume
    is noticed (its old outputs would otherwise be mixed with its new ones). Checked: inputs
    that are ``os.PathLike`` or a str containing '/', naming a regular file, for the first
    :data:`MAX_FILE_CHECKS` inputs, when resuming on the host that recorded them. Not checked:
    file contents with the same size and mtime, S3 URLs, paths inside other structures."""

    block_size: int
    block_hashes: str  # 16 hex chars per block; "" when no input is a file
    size_hashes: str = ""  # the same over sizes alone: comparable on any host ("": recorded before)

    @classmethod
    def of(
        cls, inputs: Sequence, block_size: int = FINGERPRINT_BLOCK, *, types: frozenset[type] | None = None
    ) -> InputFiles | None:
        """``types``: :func:`value_types` of ``inputs``, if the caller has it (else looked up)."""
        if types is None:
            types = value_types(inputs)
        if types is not None and not any(issubclass(k, (str, os.PathLike)) for k in types):
            return None  # no value can be a path (ints, a range, ...): nothing to stat
        hashes, sizes, found = [], [], False
        count = min(len(inputs), MAX_FILE_CHECKS)
        for start in range(0, count, block_size):
            digest, by_size = hashlib.blake2b(digest_size=8), hashlib.blake2b(digest_size=8)
            block = inputs[start : min(start + block_size, count)]
            kinds = types if types is not None and len(types) == 1 else set(map(type, block))
            if not any(issubclass(k, (str, os.PathLike)) for k in kinds) or (
                kinds == {str} and "/" not in "".join(block)
            ):
                hashes.append(digest.hexdigest())  # no path in this block (C-level checks)
                sizes.append(by_size.hexdigest())
                continue
            for offset, value in enumerate(block):
                path = _file_path(value)
                stats = _stat(path) if path is not None else None
                if stats is not None:
                    found = True
                    digest.update(f"{start + offset}:{stats[0]}:{stats[1]};".encode())
                    by_size.update(f"{start + offset}:{stats[0]};".encode())
            hashes.append(digest.hexdigest())
            sizes.append(by_size.hexdigest())
        return cls(block_size, "".join(hashes), "".join(sizes)) if found else None

    def to_json(self) -> dict:
        data: dict = {"block_size": self.block_size, "block_hashes": self.block_hashes}
        if self.size_hashes:
            data["size_hashes"] = self.size_hashes
        return data

    @classmethod
    def from_json(cls, data: dict) -> InputFiles | None:
        size, hashes = data.get("block_size"), data.get("block_hashes")
        sizes = data.get("size_hashes", "")
        if type(size) is not int or size < 1 or not isinstance(hashes, str):
            return None
        if not isinstance(sizes, str) or (sizes and len(sizes) != len(hashes)):
            sizes = ""
        return cls(size, hashes, sizes)

    def changed_blocks(self, now: InputFiles | None, count: int, *, same_host: bool) -> list[tuple[int, int]]:
        """(first, last) inputs of every block whose files differ from ``now``'s: by size and
        modification time on the host that recorded them, by size alone on another host (its
        copies have other mtimes); [] when nothing comparable differs."""
        mine = self.block_hashes if same_host else self.size_hashes
        theirs = (now.block_hashes if same_host else now.size_hashes) if now is not None else ""
        width = 16
        blocks = []
        for block in range(len(mine) // width):
            piece = slice(block * width, (block + 1) * width)
            if mine[piece] != theirs[piece]:
                first = block * self.block_size
                blocks.append((first, min(first + self.block_size, count) - 1))
        return blocks

    @staticmethod
    def modified_since(inputs: Sequence, first: int, last: int, since: float) -> list[int]:
        """The inputs ``first..last`` whose file vanished or was modified after ``since``."""
        found = []
        for i in range(first, min(last, len(inputs) - 1) + 1):
            path = _file_path(inputs[i])
            stats = _stat(path) if path is not None else None
            if path is not None and (stats is None or stats[1] / 1e9 >= since):
                found.append(i)
        return found

    def first_changed(self, inputs: Sequence, since: float) -> str | None:
        """A sentence naming an input file that changed since the run recorded its stats
        (at ``since``, a time.time()), or None."""
        now = InputFiles.of(inputs, self.block_size)
        theirs = now.block_hashes if now is not None else ""
        width = 16
        for block in range(len(self.block_hashes) // width):
            piece = slice(block * width, (block + 1) * width)
            if self.block_hashes[piece] == theirs[piece]:
                continue
            first = block * self.block_size
            last = min(first + self.block_size, len(inputs)) - 1
            for i in range(first, last + 1):  # name the file: the one modified after the run started
                path = _file_path(inputs[i])
                stats = _stat(path) if path is not None else None
                if path is not None and (stats is None or stats[1] / 1e9 >= since):
                    return (
                        f"input {i:,} ({short_repr(path, 200)}) changed or vanished since the interrupted run started"
                    )
            return f"an input file between input {first:,} and {last:,} changed (size or modification time)"
        return None
