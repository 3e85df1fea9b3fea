"""Shards: contiguous ranges of inputs, the unit of order, resume and distribution.

The dataset is the concatenation of the shards in shard order, each in input order. The
number of shards is fixed when a run is created (an explicit ``num_shards``, else
``default_num_shards``) and recorded in its manifest; a resume, or another node joining,
uses the recorded number whatever its own worker count, so the plan never changes under a
run.
"""

from __future__ import annotations

# Default shards per worker of the whole run (num_workers x num_nodes). Every shard ends in a
# partly filled chunk, so each shard costs a small chunk: a fixed 64 made 64 chunks of ~87 KB
# out of a 5 MB dataset asked for in 64 MB chunks. One shard per worker would give the fewest
# chunks but no balancing (a worker whose inputs are slow would finish last, alone); 4 lets
# the others take over the remaining shards, so the tail is at most about a quarter of one
# worker's share.
SHARDS_PER_WORKER = 4
# Upper bound on num_shards, checked in optimize() and on every manifest read from disk, so a
# hand-edited manifest cannot make status or merge loop over 10^8 shards.
MAX_NUM_SHARDS = 100_000


def default_num_shards(
    num_inputs: int, num_workers: int, num_nodes: int = 1, per_worker: int = SHARDS_PER_WORKER
) -> int:
    """``per_worker`` (default ``SHARDS_PER_WORKER``; the engine passes ``concurrency`` when it is
    larger) shards per worker of the whole run (``num_workers`` on each of
    ``num_nodes`` nodes): enough to keep every worker busy and balance uneven inputs, few
    enough that each shard's last, partly filled chunk is not noise in the dataset. Never
    more shards than inputs nor than ``MAX_NUM_SHARDS``."""
    workers = max(1, num_workers) * max(1, num_nodes)
    return clamp_num_shards(min(max(1, per_worker) * workers, MAX_NUM_SHARDS), num_inputs)


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
