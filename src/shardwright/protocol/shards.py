"""Shards: contiguous ranges of inputs, the unit of order, resume and distribution.

The dataset is the concatenation of the shards in shard order, each in input order. The
number of shards depends only on the inputs (or an explicit ``num_shards``), never on the
number of workers or nodes, so a resume may use another worker count and an array of any
size can share one plan.
"""

from __future__ import annotations

DEFAULT_MAX_SHARDS = 64
# Upper bound on num_shards, checked in optimize() and on every manifest read from disk, so a
# hand-edited manifest cannot make status or merge loop over 10^8 shards.
MAX_NUM_SHARDS = 100_000


def default_num_shards(num_inputs: int) -> int:
    """Enough shards to keep every local worker busy and balance uneven inputs, few enough
    that each shard's last, partly filled chunk is not noise in the dataset."""
    return clamp_num_shards(DEFAULT_MAX_SHARDS, num_inputs)


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
