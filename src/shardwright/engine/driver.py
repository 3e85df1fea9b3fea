"""The driver of every optimize() call, whatever runs its shards: everything before and after
the work, once.

Before: fn's identity, the output opened and checked (shared by other machines only if its
storage can be), the node lease, the attempt log, ``open_call`` (decide, then create or
resume the manifest). Then the executor runs the unfinished shards
(``executor.run_shards``). After: the lease confirmed, index.json published, the empty-run
warning, the :class:`OptimizeResult` with the plan's note, the attempt closed and the lease
released (not after a storage outage: it expires on its own). As Ray's job manager owns a
job's life and its supervisor only runs the entrypoint, an executor (local, Ray) only runs
shards.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

from .. import telemetry
from ..errors import ConcurrentRunError, CorruptStateError, IncompleteRunError, LeaseLostError
from ..protocol.fn_identity import FnIdentity, describe_changes
from ..protocol.layout import lease_key
from ..protocol.lease import HolderFields, Lease, live_leases
from ..protocol.manifest import Manifest
from ..protocol.publish import finished_by_another, publish_if_complete
from ..protocol.run_record import read_run_record
from ..storage import Storage
from .attempts import AttemptLog
from .executors import Executor, ExecutorCall, OpenedRun, Placement, ShareTotals
from .identity import fn_identity
from .opening import check_shared_output, make_request, open_call, open_output
from .options import fn_name
from .planning import NodeIdentity
from .result import OptimizeResult, empty_run_note

log = logging.getLogger("shardwright")


def drive(call: ExecutorCall, executor: Executor) -> OptimizeResult:
    """Run ``call`` with ``executor`` (see the module docstring)."""
    # the run's span starts now; the SDK (when the OTEL_* variables enable it) starts in the
    # background while the output is opened, and the span is created once it has (run.open())
    with telemetry.RunSpan("shardwright.optimize", output=str(call.output_dir)) as run_span:
        with executor.place(call) as placement:
            return _drive(call, executor, placement, run_span)


def call_identity(fn: Callable) -> FnIdentity:
    """fn's identity, computed once per call (the request and run.json both use it), with a
    warning for what it could not compare."""
    identity = fn_identity(fn)
    if identity.skipped:
        log.warning(
            "fn %s refers to state that cannot be compared by value, so a change there cannot be detected "
            "on resume or rerun: %s",
            identity.name,
            describe_changes(list(identity.skipped)),
        )
    return identity


def node_lease(storage: Storage, node: NodeIdentity, executor: str | None) -> Lease:
    """The lease on ``node``'s share of the run (the whole run for a single node)."""
    fields = HolderFields(node_rank=node.rank, num_nodes=node.count, executor=executor)
    what = f"node {node.rank}'s share" if node.is_multi_node else "the run"
    return Lease(storage, f"node-{node.rank}", what, fields)


def _drive(call: ExecutorCall, executor: Executor, placement: Placement, run_span: telemetry.RunSpan) -> OptimizeResult:
    options, inputs, node = call.options, call.inputs, placement.node
    identity = call_identity(call.fn)
    inputs.check_before_writing()
    storage = open_output(call.output_dir, options)
    if placement.shared_by is not None:
        check_shared_output(storage, options, placement.shared_by)
    inputs.load_state(storage)  # a JSONL line index an earlier attempt kept
    request = make_request(identity, inputs, options, placement.num_nodes)

    lease = node_lease(storage, node, placement.executor)
    lease.acquire(storage.url)
    attempt = AttemptLog(storage, node, options.mode, options.storage_options)
    store_answered = True
    run_id: str | None = None  # the run this call opened or resumed, once known
    try:
        _check_peers_agree(storage, lease, node)
        notes: list[str] = []
        opened = open_call(storage, request, inputs, notes)
        if opened is None:
            attempt.close("noop")
            result = OptimizeResult(
                output_dir=storage.url,
                items=0,
                chunks=0,
                bytes=0,
                seconds=time.monotonic() - call.started,
                resumed=True,
                published=True,
                inputs=len(inputs),
                note="; ".join(notes),
            )
            if options.verbose and notes:
                print(f"shardwright: {result}", file=sys.stderr)
            return result
        manifest, resumed = opened
        run_id = manifest.run_id
        run = OpenedRun(call, storage, manifest, resumed, node, lease, attempt)
        counters = run_span.open()  # before the workers start: they put their spans under the attempt's
        with counters.span("shardwright.attempt", mode=manifest.mode, resumed=resumed, node=node.rank):
            with counters.handed_to_children():  # worker processes' commit spans join this trace
                totals = executor.run_shards(run)
        result = _finish(run, totals, identity, "; ".join(notes))
        attempt.close("published" if result.published else "waiting")
        if options.verbose:
            print(f"shardwright: {result}", file=sys.stderr)
        return result
    except BaseException as exc:  # recorded in the run's history, then raised (explained when superseded)
        if not isinstance(exc, ConcurrentRunError):  # another run owns the output: not ours to write
            store_answered = attempt.close_for(exc) is not None
        if isinstance(exc, (LeaseLostError, IncompleteRunError)) and run_id is not None:
            finished = finished_by_another(storage, run_id)
            if finished is not None:
                raise LeaseLostError(f"stopped: {finished}") from None
        raise
    finally:
        lease.release(ask_storage=store_answered)  # no history written (an outage): let it expire


def _finish(run: OpenedRun, totals: ShareTotals, identity: FnIdentity, note: str) -> OptimizeResult:
    """After the executor's shards: confirm the lease, publish when every shard is done."""
    storage, manifest, lease, node = run.storage, run.manifest, run.lease, run.node
    if lease.lost:
        raise LeaseLostError(f"stopped: {lease.lost}")
    lease.confirm()  # a run paused past its TTL must learn it before it publishes
    published, missing = publish_if_complete(storage, manifest, dict(totals.known), identity)
    if published:
        _warn_if_empty(storage, manifest, fn_name(run.call.fn))
    result = OptimizeResult(
        output_dir=storage.url,
        items=totals.items,
        chunks=totals.chunks,
        bytes=totals.bytes,
        seconds=time.monotonic() - run.call.started,
        resumed=run.resumed,
        published=published,
        inputs=manifest.num_inputs,
        failed=totals.failed,
        pending_shards=missing,
        note=note,
    )
    if not published and not node.is_multi_node:
        # One node runs every shard: nobody else will publish. Returning would look like
        # success with no dataset (e.g. records listed under another key than written).
        raise IncompleteRunError(_unpublished_message(storage, missing), missing_shards=missing)
    if missing and node.variables:
        # a leftover export makes a single-node run one node of several: say where it came from
        log.warning(
            "this call is node %d of %d (from %s): %d shard(s) wait for the other node(s), which must run "
            "the same call. For a single-node run, unset those variables",
            node.rank,
            node.count,
            node.origin,
            len(missing),
        )
    return result


def _check_peers_agree(storage: Storage, lease: Lease, node: NodeIdentity) -> None:
    """Live nodes with another num_nodes would own overlapping shards: refuse, never race."""
    for _name, holder in live_leases(storage):
        if holder.owner != lease.owner and holder.num_nodes is not None and holder.num_nodes != node.count:
            raise ConcurrentRunError(
                f"node {holder.node_rank} of {holder.num_nodes} (host {holder.host}, "
                f"pid {holder.pid}) is running on {storage.url}, and this call is node {node.rank} of "
                f"{node.count}: every node of a run must use the same number of nodes ({node.origin}). "
                "Wait for it to finish, or stop it and rerun with the same count"
            )


def _warn_if_empty(storage: Storage, manifest: Manifest, name: str) -> None:
    """A run of N > 0 inputs that added no item is almost always a fn that forgot ``return``
    (read from the published run record: what the run added, whichever executor ran it)."""
    try:
        last = read_run_record(storage)
    except CorruptStateError:
        return
    if last and last.run_id == manifest.run_id and manifest.num_inputs and last.items_added == 0:
        log.warning("%s", empty_run_note(name, manifest.num_inputs, len(last.failed_inputs), storage.url))


def _unpublished_message(storage: Storage, missing: list[int]) -> str:
    """Why a single-node run that ran every shard could not publish, and what to do."""
    if missing:
        shown = ", ".join(str(s) for s in missing[:10]) + (", ..." if len(missing) > 10 else "")
        return (
            f"the run finished its inputs but {storage.url} still lacks the records of {len(missing)} shard(s) "
            f"({shown}), so index.json was not published: the storage does not list what was written. "
            f"Rerun the same call to redo them, or run `shardwright status {storage.url}`"
        )
    holders = [h.describe(lease_key(n), storage.url) for n, h in live_leases(storage, "publish")]
    who = f" (held by {holders[0]})" if holders else ""
    return (
        f"the run finished every shard but could not publish {storage.url}/index.json: another process holds "
        f"the publish lease{who}. Rerun the same call once it is gone, or run `shardwright merge {storage.url}`"
    )
