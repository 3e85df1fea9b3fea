"""The ``shardwright`` command: ``status``, ``merge``, ``clean``, ``runs``, ``history``, ``slurm``, ``k8s``,
``serve`` and ``jobs``.

Every command exits 0 on success, 1 when it ran but the answer is "not yet" (merge with
unfinished shards), and 2 with one ``shardwright: error: ...`` line for a mistake or a
failure (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..engine.abandon import abandon
from ..errors import DatasetNotFoundError, IncompleteRunError, ShardwrightError, UsageError
from ..protocol.history import Attempt, read_history
from ..protocol.layout import FAILED_PREFIX, INDEX_KEY, short_run_id
from ..protocol.publish import merge
from ..protocol.status import RunStatus, read_status, stop_reason
from ..secrets import redact, redact_url_credentials, secret_values
from ..storage import open_dataset_storage, open_storage
from .k8s import add_k8s_command
from .options import parse_storage_options
from .runs import list_runs
from .slurm import add_slurm_command
from .verify import add_diff_command, add_verify_command, run_verify


def status_report(output_dir: str, storage_options: dict | None = None) -> dict:
    """What is done, in progress, pending and failed, as a JSON-ready dict (``status --json``).

    Args:
        output_dir: a local directory, ``s3://``, ``gs://`` or ``az://`` URL.
        storage_options: the backend's options (boto3 client arguments for s3://, the SDKs' names
            for gs:// and az://: docs/clouds.md).

    Returns:
        :meth:`shardwright.protocol.status.RunStatus.to_json`.

    Raises:
        DatasetNotFoundError: the directory does not exist.
        StorageError: the storage cannot be read.
        CorruptStateError: the run state is damaged.
    """
    return read_status(open_storage(output_dir, storage_options)).to_json()


def print_status(report: RunStatus) -> None:
    """The human-readable form of a status report."""
    print(f"output:   {report.output_dir}")
    if report.state in ("complete", "empty"):
        print(
            f"state:    {report.state}" + (" (index.json published)" if report.published else " (nothing written yet)")
        )
        last = report.last_run
        if last:
            print(
                f"last run: {last.get('items_added', 0):,} items added in {last.get('chunks_added', 0):,} chunks, "
                f"{last.get('seconds', 0):.1f} s; dataset has {last.get('items', 0):,} items in "
                f"{last.get('chunks', 0):,} chunks"
            )
    else:
        total = report.inputs
        pct = 100.0 * report.inputs_done / total if total else 100.0
        reason = f" ({report.stop_reason})" if report.stop_reason else ""
        if report.stop_reason and report.stop_reason.startswith(report.state):
            reason = report.stop_reason[len(report.state) :]  # "interrupted (SIGTERM)", not the state twice
        print(f"state:    {report.state}{reason} (run {short_run_id(report.run_id)}, {report.mode}, fn {report.fn})")
        kept = (
            f" (+{report.inputs_in_tails:,} kept in pending tails, committed on resume)"
            if report.inputs_in_tails
            else ""
        )
        print(
            f"inputs:   {report.inputs_done:,} of {total:,} committed ({pct:.1f}%){kept}, "
            f"{report.items_committed:,} items in {report.chunks_committed:,} chunks committed"
        )
        print(
            f"shards:   {len(report.shards_done)} done, {len(report.shards_in_progress)} in progress, "
            f"{len(report.shards_pending)} pending (of {report.shards})"
        )
        counts = report.counts
        if counts:
            eta = f", about {_duration(report.eta_s)} left" if report.eta_s is not None else ""
            print(
                f"inputs:   {counts['done']:,} done"
                + (f" (+{counts['in_tails']:,} in pending tails)" if counts.get("in_tails") else "")
                + f", {counts['in_progress']:,} in progress, "
                f"{counts['pending']:,} pending, {counts['failed']:,} failed{eta}"
            )
        for entry in report.in_progress[:64]:
            print(f"  now:    {entry.describe()} (worker {entry.worker}, {entry.place})")
        if len(report.in_progress) > 64:
            print(f"          ... and {len(report.in_progress) - 64} more in progress (--json lists them all)")
        for node in report.nodes:
            print(
                f"node {node.node}:   {node.shards_done}/{node.shards} shards done, {node.inputs_done:,} of "
                f"{node.inputs:,} inputs ({'running' if node.live else 'not running'})"
            )
        for lease in report.leases:
            if lease.shard is not None:
                continue  # shard claims: one line below
            print(
                f"lease:    {lease.name} held by {lease.host} pid {lease.pid}, heartbeat "
                f"{_ago(lease.heartbeat_age_s)} ({'live' if lease.live else 'stale'})"
            )
            if lease.live and lease.current_inputs:
                on = ", ".join(
                    f"worker {w}: input {i:,}" if i >= 0 else f"worker {w}: starting"
                    for w, i in enumerate(lease.current_inputs)
                )
                print(f"workers:  {on}")
        claims = [lease for lease in report.leases if lease.shard is not None and lease.live]
        for lease in claims[:64]:
            print(f"shard {lease.shard}: held by {lease.place}, pid {lease.pid}")
        if len(claims) > 64:
            print(f"          ... and {len(claims) - 64} more claimed shards (--json lists them all)")
        tried = report.last_attempt
        if tried is not None and report.state != "running":
            error = f": {tried.error.message}" if tried.error is not None and tried.ended == "failed" else ""
            print(
                f"last try: {tried.ended} on {tried.host} (pid {tried.pid}"
                f"{', Slurm task ' + tried.slurm_task if tried.slurm_task else ''}), "
                f"{tried.inputs_done_after - tried.inputs_done_before:,} inputs done in it{error}"[:600]
            )
        if report.state in ("interrupted", "failed"):
            print(
                "resume:   rerun the same optimize() call, or abandon the run (keeping a published dataset) "
                f"with `shardwright clean {report.output_dir}`"
            )
    if report.failed_records:
        print(f"failed:   {report.failed_records} failure record(s) under {report.output_dir}/{FAILED_PREFIX}")


def _duration(seconds: float) -> str:
    """``2 h 05 min``, ``3 min 20 s``, ``12 s``."""
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def _ago(seconds: float) -> str:
    """ "12.5 s ago", or for a time ahead of this clock (clock skew, a hand edit) "in the future"."""
    if seconds < 0:
        return f"{-seconds:,.1f} s in the future (a clock ahead of this one, or a hand edit)"
    return f"{seconds:,.1f} s ago"


def print_history(attempts: list[Attempt], as_json: bool) -> None:
    """The run history of an output, oldest first."""
    if as_json:
        print(json.dumps([a.to_json() for a in attempts], indent=1))
        return
    if not attempts:
        print("no recorded attempts")
    for a in attempts:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.started_at))
        reason = f" ({stop_reason(a)})" if a.ended == "failed" else ""
        print(
            f"{when}  run {short_run_id(a.run_id, '-')}  node {a.node_rank}/{a.num_nodes}  {a.host} pid {a.pid}  "
            f"{a.finished_at - a.started_at:,.1f} s  inputs {a.inputs_done_before:,}->{a.inputs_done_after:,}"
            f"/{a.inputs_total:,}  {a.ended}{reason}"
        )


STORAGE_OPTIONS_HELP = (
    "JSON dict of storage options (boto3 client arguments for s3://; gs:// and az://: docs/clouds.md)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwright", description="Inspect and finish shardwright outputs.")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="what is done, in progress, pending and failed")
    status.add_argument("output_dir")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument("--storage-options", help=STORAGE_OPTIONS_HELP)
    merge_cmd = sub.add_parser("merge", help="publish index.json once every shard is done")
    merge_cmd.add_argument("output_dir")
    merge_cmd.add_argument("--storage-options", help=STORAGE_OPTIONS_HELP)
    clean = sub.add_parser("clean", help="abandon the unfinished run, keeping the published dataset")
    clean.add_argument("output_dir")
    clean.add_argument("--storage-options", help=STORAGE_OPTIONS_HELP)
    runs = sub.add_parser("runs", help="every shardwright output under a local directory or S3 prefix, with its state")
    runs.add_argument("root")
    runs.add_argument("--json", action="store_true", help="print the outputs as JSON")
    runs.add_argument("--storage-options", help=STORAGE_OPTIONS_HELP)
    history = sub.add_parser("history", help="the recorded attempts (optimize() calls) on an output")
    history.add_argument("output_dir")
    history.add_argument("--json", action="store_true", help="print the attempts as JSON")
    history.add_argument("--storage-options", help=STORAGE_OPTIONS_HELP)
    add_verify_command(sub)
    add_diff_command(sub)
    add_slurm_command(sub)
    add_k8s_command(sub)
    from ..service.commands import add_service_commands  # serve, jobs (running them needs the service extra)

    add_service_commands(sub)
    return parser


def existing_storage(output_dir: str, storage_options: dict | None, *, reads_only: bool = False):
    """The storage of an output that must exist already: a missing local directory is a
    DatasetNotFoundError (exit 2), not an "empty" report. ``reads_only``: a command that only
    reads it (status, history, runs), whose mistakes name a dataset location, not an output_dir."""
    storage = (
        open_dataset_storage(output_dir, storage_options) if reads_only else open_storage(output_dir, storage_options)
    )
    path = storage.local_path(INDEX_KEY)
    if path is not None and not os.path.isdir(os.path.dirname(path)):
        raise DatasetNotFoundError(f"{storage.url} does not exist; check the path")
    return storage


def main(argv: list[str] | None = None) -> int:
    """Run the ``shardwright`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # `shardwright status DIR | head`: the reader went away; that is not an error. Point
        # stdout at /dev/null so that the interpreter's final flush does not complain either.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "status":
            options = parse_storage_options(args.storage_options)
            report = read_status(existing_storage(args.output_dir, options, reads_only=True))
            if args.json:
                print(json.dumps(report.to_json(), indent=1, default=str))
            else:
                print_status(report)
            return 0
        if args.command == "merge":
            try:
                merge(existing_storage(args.output_dir, parse_storage_options(args.storage_options)))
            except IncompleteRunError as exc:
                print(str(exc), file=sys.stderr)
                return 1
            print(f"merged: {args.output_dir}/index.json is published")
            return 0
        if args.command == "clean":
            if abandon(args.output_dir, parse_storage_options(args.storage_options)):
                print(f"cleaned: the unfinished run in {args.output_dir} is discarded; a published dataset is kept")
            else:
                print(f"nothing to clean: {args.output_dir} has no unfinished run")
            return 0
        if args.command == "verify":
            return run_verify(args.output_dir, parse_storage_options(args.storage_options), args.json)
        if args.command == "runs":
            options = parse_storage_options(args.storage_options)
            existing_storage(
                args.root, options, reads_only=True
            )  # a missing local root is exit 2, like the other commands
            return list_runs(args.root, options, args.json)
        if args.command == "history":
            options = parse_storage_options(args.storage_options)
            attempts = read_history(existing_storage(args.output_dir, options, reads_only=True))
            print_history(attempts, args.json)
            return 0
        return int(args.func(args))
    except ShardwrightError as exc:
        options = getattr(args, "storage_options", None)
        try:
            parsed = parse_storage_options(options)
        except UsageError:
            parsed = None
        secrets = secret_values(parsed)
        if options and parsed is None:
            secrets.append(options)  # unparseable: the whole text may hold a secret
        # a URL typed with user:password@ (s3://KEY:SECRET@bucket/x) came back in the message
        print(f"shardwright: error: {redact_url_credentials(redact(str(exc), secrets))}", file=sys.stderr)
        return 2
