"""Planning: which inputs form which shard, which node owns which shard, and the run's identity.

A *shard* is a contiguous range of input indices. Shards are the unit of ordering (the
dataset is the concatenation of shards in shard order, each in input order), of resume
(each shard has its own checkpoint records), and of distribution (a worker or a node takes
whole shards). Their number depends only on the number of inputs (or an explicit
``num_shards``), never on ``num_workers`` or on the number of nodes, so a resume may use a
different worker count and a Slurm array of any size can share the same plan.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InputsError, RunMismatchError, ShardwrightError

DEFAULT_MAX_SHARDS = 64
FINGERPRINT_BLOCK = 256  # inputs per hash block: 1M inputs -> 3,907 hashes (62 KB of hex)


def default_num_shards(num_inputs: int) -> int:
    """Enough shards to keep every local worker busy and balance uneven inputs, few enough
    that each shard's last, partly filled chunk is not noise in the dataset."""
    return max(1, min(num_inputs, DEFAULT_MAX_SHARDS))


def shard_bounds(num_inputs: int, num_shards: int, shard: int) -> tuple[int, int]:
    """[start, end) input indices of ``shard``; sizes differ by at most one."""
    return shard * num_inputs // num_shards, (shard + 1) * num_inputs // num_shards


def shards_of_node(num_shards: int, node_rank: int, num_nodes: int) -> list[int]:
    """Round-robin, so every node gets a share from the whole input range."""
    return list(range(node_rank, num_shards, num_nodes))


def check_inputs(inputs: object) -> Sequence:
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        kind = type(inputs).__name__
        raise InputsError(
            f"inputs must be a sequence with len() and indexing (list, tuple, range); got {kind}. "
            "Wrap an iterator or generator in list(...) first."
        )
    return inputs


# --- fingerprint of the inputs -------------------------------------------------------------


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


def short_repr(value: object, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- node identity ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeIdentity:
    rank: int
    count: int
    source: str  # where it came from, for messages

    @property
    def is_multi_node(self) -> bool:
        return self.count > 1


_ENV_PAIRS = (
    # (rank variable, count variable, label); the first pair that is set wins.
    ("DATA_OPTIMIZER_NODE_RANK", "DATA_OPTIMIZER_NUM_NODES", "litdata's DATA_OPTIMIZER_* variables"),
    ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "the Slurm job array"),
    ("SLURM_PROCID", "SLURM_NTASKS", "the Slurm step (srun)"),
)


def _parse_int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ShardwrightError(f"{name}={value!r} is not an integer") from None


def node_identity(num_nodes: int | None, node_rank: int | None, env: dict | None = None) -> NodeIdentity:
    """Which share of the shards this process runs: explicit arguments win, then litdata's
    variables, then a Slurm array, then an srun step; a single node otherwise."""
    env = os.environ if env is None else env
    if (num_nodes is None) != (node_rank is None):
        raise ShardwrightError(
            "pass both num_nodes and node_rank (or neither, to read them from the environment); "
            f"got num_nodes={num_nodes}, node_rank={node_rank}"
        )
    if num_nodes is not None and node_rank is not None:
        return _validated(node_rank, num_nodes, "the num_nodes/node_rank arguments")
    for rank_var, count_var, label in _ENV_PAIRS:
        if rank_var == "SLURM_PROCID":
            if "SLURM_JOB_ID" in env and "SLURM_STEP_ID" not in env:
                # A batch script itself, not an srun step: Slurm sets SLURM_PROCID=0 there, and
                # SLURM_NTASKS only with -n (the allocation's size, not processes running this
                # code). One process runs here, so it is the whole run.
                continue
            if "SLURM_STEP_NUM_TASKS" in env:
                count_var = "SLURM_STEP_NUM_TASKS"  # `srun -n K` in a larger allocation
        has_rank, has_count = rank_var in env, count_var in env
        if has_rank != has_count:
            present, missing = (rank_var, count_var) if has_rank else (count_var, rank_var)
            raise ShardwrightError(
                f"{present} is set but {missing} is not, so this node cannot know its share of the work; "
                f"set both, or pass num_nodes= and node_rank= to optimize()"
            )
        if has_rank:
            rank = _parse_int(rank_var, env[rank_var])
            count = _parse_int(count_var, env[count_var])
            if rank_var == "SLURM_ARRAY_TASK_ID":
                # --array=4-10:2 gives ids 4, 6, 8, 10: ranks 0..3
                rank -= _parse_int("SLURM_ARRAY_TASK_MIN", env.get("SLURM_ARRAY_TASK_MIN", "0"))
                step = _parse_int("SLURM_ARRAY_TASK_STEP", env.get("SLURM_ARRAY_TASK_STEP", "1"))
                if step > 1 and rank % step == 0:
                    rank //= step
            return _validated(rank, count, label)
    return NodeIdentity(0, 1, "a single node")


def _validated(rank: int, count: int, source: str) -> NodeIdentity:
    if count < 1 or not 0 <= rank < count:
        raise ShardwrightError(
            f"node rank {rank} of {count} nodes (from {source}) is out of range: need 0 <= rank < count"
        )
    return NodeIdentity(rank, count, source)


def check_settings_match(recorded: dict, current: dict) -> None:
    """Refuse to resume when a setting that shapes the output changed."""
    for key in sorted(set(recorded) | set(current)):
        if recorded.get(key) != current.get(key):
            raise RunMismatchError(
                f"settings changed since the interrupted run: {key} was {recorded.get(key)!r}, now "
                f"{current.get(key)!r}; rerun with {key}={recorded.get(key)!r} to resume, "
                "or pass mode='overwrite' to start over"
            )
