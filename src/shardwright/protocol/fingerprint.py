"""The fingerprint of a run's inputs: how a resume knows it was given the same inputs."""

from __future__ import annotations

import hashlib
import io
import pickle
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InputsError, short_repr

FINGERPRINT_BLOCK = 256  # inputs per hash block: 1M inputs -> 3,907 hashes (62 KB of hex)


def _stable_pickle(values: list) -> bytes:
    """Pickle without the memo, so equal inputs give equal bytes whether or not they are the
    same object (``[p, p]`` vs ``[p, copy(p)]``)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=4)
    pickler.fast = True  # no memo; fails on self-referencing inputs, handled below
    try:
        pickler.dump(values)
    except (ValueError, RecursionError):
        return pickle.dumps(values, protocol=4)
    return buffer.getvalue()


@dataclass(frozen=True)
class InputsFingerprint:
    count: int
    block_size: int
    block_hashes: str  # 16 hex chars per block of ``block_size`` inputs

    @classmethod
    def of(cls, inputs: Sequence, block_size: int = FINGERPRINT_BLOCK) -> "InputsFingerprint":
        hashes = []
        for start in range(0, len(inputs), block_size):
            block = list(inputs[start : start + block_size])
            try:
                data = _stable_pickle(block)
            except Exception as exc:  # pickling errors come in many types
                bad = next((start + k for k, v in enumerate(block) if not _picklable(v)), start)
                raise InputsError(
                    f"input {bad:,} ({short_repr(inputs[bad])}) cannot be pickled: {exc}. "
                    "Inputs are sent to worker processes, so use picklable values "
                    "(ints, str, Path, tuples, dicts)."
                ) from exc
            hashes.append(hashlib.blake2b(data, digest_size=8).hexdigest())
        return cls(count=len(inputs), block_size=block_size, block_hashes="".join(hashes))

    def to_json(self) -> dict:
        return {"count": self.count, "block_size": self.block_size, "block_hashes": self.block_hashes}

    @classmethod
    def from_json(cls, data: dict) -> "InputsFingerprint":
        return cls(int(data["count"]), int(data["block_size"]), str(data["block_hashes"]))

    def first_difference(self, other: "InputsFingerprint") -> str | None:
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


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False
