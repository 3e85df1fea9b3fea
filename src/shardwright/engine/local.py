"""The local executor: this machine, or this node of a Slurm or Kubernetes run, runs its
node's share of the shards on its worker pool. Its hooks tie the share to the driver's node
lease: the input each worker is on goes out with the lease's heartbeat, a lease taken over
stops the pool, and a claim taken under a superseded node lease is stale."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import UsageError
from ..protocol.lease import HolderFields, LeaseHolder, lease_owner
from ..protocol.shards import shards_of_node
from .executors import ExecutorCall, OpenedRun, Placement, ShareTotals
from .guards import check_main_guard
from .options import fn_name
from .planning import KUBERNETES, node_identity
from .share import CurrentInputs, run_share

log = logging.getLogger("shardwright")


class LocalExecutor:
    """``executor="local"`` (see the module docstring)."""

    @contextmanager
    def place(self, call: ExecutorCall) -> Iterator[Placement]:
        options = call.options
        node = node_identity(options.num_nodes, options.node_rank)
        if node.is_multi_node and not options.use_checkpoint:
            raise UsageError("multi-node runs need use_checkpoint=True: nodes learn each other's progress from it")
        if options.start_method != "fork":
            check_main_guard(call.fn, options.start_method)
            _check_picklable(call.fn, options.start_method)
        if node.is_multi_node:
            log.info("this call is node %d of %d (from %s)", node.rank, node.count, node.origin)
        pods = node.is_multi_node and node.source == KUBERNETES
        yield Placement(node, node.count, f"{node.count} pods of a Kubernetes Indexed Job" if pods else None)

    def run_shards(self, run: OpenedRun) -> ShareTotals:
        storage, lease, node, options = run.storage, run.lease, run.node, run.call.options

        def on_idle(current: CurrentInputs) -> str | None:
            # by name too: a status read before the shard claims' first heartbeat names them from here
            lease.show_current_inputs(current.inputs, current.names, current.states, current.calls)
            return lease.lost  # set by the heartbeat when another run (a requeue) took our lease

        share = run_share(
            storage,
            run.manifest,
            run.call.fn,
            run.call.inputs,
            options,
            node.rank,
            shards_of_node(run.manifest.num_shards, node.rank, node.count),
            claim_fields=HolderFields(node_rank=node.rank, num_nodes=node.count, node_lease=lease.owner),
            judge=lambda holder: superseded_node(holder, node.rank, lease_owner(storage, lease.key)),
            standing=lambda: None if lease_owner(storage, lease.key) == lease.owner else f"{lease.what} was taken over",
            attempt=run.attempt,
            on_idle=on_idle,
            verbose=options.verbose,
            fresh=not run.resumed and not node.is_multi_node,
        )
        tracker = share.tracker
        return ShareTotals(
            items=tracker.items,
            chunks=tracker.chunks,
            bytes=tracker.bytes,
            failed=sum(len(p.failed) for p in share.progress.values()),
            known=share.progress,
        )


def superseded_node(holder: LeaseHolder, rank: int, owner: str | None) -> str | None:
    """A claim taken under node ``rank``'s lease by an earlier holder of that lease, whose
    owner is now ``owner`` (read from storage: the lease was taken over from a paused or cut
    off run): stale, since the node lease says who runs the rank's share; that holder's
    writes are fenced by the claim's epoch. A run that itself lost the lease sees the new
    holder's claims as current."""
    if holder.node_rank == rank and holder.node_lease is not None and owner is not None and holder.node_lease != owner:
        return f"it was taken under node {rank}'s lease, which another run holds now"
    return None


def _check_picklable(fn: Callable, start_method: str) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise UsageError(
            f"fn {fn_name(fn)} cannot be pickled, which start_method={start_method!r} needs ({exc}). "
            "Define fn at the top level of an importable .py file (not in a notebook, not a lambda or closure), "
            "or use start_method='fork' (the default on Linux)"
        ) from None
