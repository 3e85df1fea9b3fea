"""Shards: contiguous ranges of inputs, the unit of order, resume and distribution.

The dataset is the concatenation of the shards in shard order, each in input order. The
number of shards is fixed when a run is created (an explicit ``num_shards``, else
``default_num_shards``) and recorded in its manifest; a resume, or another node joining,
uses the recorded number whatever its own worker count, so the plan never changes under a
run.
"""

from __future__ import annotations

# The default count depends on the inputs only, never on the workers or nodes, so the same
# inputs give the same shards, hence the same chunks, whatever the parallelism of the run
# (issue 35). Every shard ends in a partly filled chunk, so the count is a floor on the number
# of chunks; 64 keeps 4 shards per worker for 16 workers (or 2 nodes of 8, or 2 I/O-bound
# workers keeping 32 calls in flight each: engine.inflight caps a worker's held inputs at its
# even share, so small shards are fine there) and costs little on small data (64 chunks). A
# run with more inputs than 64 x INPUTS_PER_SHARD gets one shard per INPUTS_PER_SHARD inputs,
# so a large run on many nodes still has shards to balance.
DEFAULT_NUM_SHARDS = 64
INPUTS_PER_SHARD = 100_000
# Upper bound on num_shards, checked in optimize() and on every manifest read from disk, so a
# hand-edited manifest cannot make status or merge loop over 10^8 shards.
MAX_NUM_SHARDS = 100_000


def default_num_shards(num_inputs: int) -> int:
    """``DEFAULT_NUM_SHARDS``, or one shard per ``INPUTS_PER_SHARD`` inputs when that is more;
    never more shards than inputs nor than ``MAX_NUM_SHARDS``. A function of the inputs only:
    1, 2 or 16 workers on one or many nodes cut the same inputs the same way."""
    per_inputs = -(-max(0, num_inputs) // INPUTS_PER_SHARD)
    return clamp_num_shards(min(max(DEFAULT_NUM_SHARDS, per_inputs), MAX_NUM_SHARDS), num_inputs)


def clamp_num_shards(num_shards: int, num_inputs: int) -> int:
    """The shards a run of ``num_inputs`` inputs really has: at least one, and no more than
    inputs (an empty shard would only be noise)."""
    return max(1, min(num_shards, num_inputs))


def shard_bounds(num_inputs: int, num_shards: int, shard: int) -> tuple[int, int]:
    """[start, end) input indices of ``shard``; sizes differ by at most one."""
    return shard * num_inputs // num_shards, (shard + 1) * num_inputs // num_shards


def shards_of_node(num_shards: int, node_rank: int, num_nodes: int) -> list[int]:
    """Round-robin, so every node gets a share from the whole input range."""
    return list(range(node_rank, num_shards, num_nodes))
