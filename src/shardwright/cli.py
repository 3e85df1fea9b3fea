"""The ``shardwright`` command: ``status``, ``merge`` (and ``slurm``, see slurm.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import checkpoint
from .errors import ShardwrightError
from .storage import open_storage


def _storage_options(args) -> dict | None:
    return json.loads(args.storage_options) if getattr(args, "storage_options", None) else None


def status_report(output_dir: str, storage_options: dict | None = None) -> dict:
    """What is done, in progress, pending and failed, as a dict (``--json``) and for printing."""
    storage = open_storage(output_dir, storage_options)
    report: dict = {"output_dir": storage.url, "published": storage.exists(checkpoint.INDEX_KEY)}
    manifest = checkpoint.read_manifest(storage)
    report["last_run"] = checkpoint.read_run_record(storage)
    report["failed_records"] = len([k for k in storage.list(checkpoint.FAILED_PREFIX) if k.endswith(".json")])
    if manifest is None:
        report["state"] = "complete" if report["published"] else "empty"
        return report
    progress = checkpoint.load_progress(storage, manifest.shard_bounds(), manifest.run_id)
    done = [s for s, p in progress.items() if p.done]
    started = [s for s, p in progress.items() if p.records and not p.done]
    pending = [s for s, p in progress.items() if not p.records]
    leases = [
        {"name": name, "host": holder.get("host"), "pid": holder.get("pid"),
         "heartbeat_age_s": round(time.time() - float(holder.get("heartbeat", 0)), 1),
         "live": checkpoint.lease_is_live(holder)}
        for name, holder in checkpoint.read_leases(storage)
    ]
    report.update(
        state="running" if any(lease["live"] for lease in leases) else "interrupted",
        run_id=manifest.run_id, mode=manifest.mode, generation=manifest.generation,
        inputs=manifest.num_inputs, inputs_done=sum(p.inputs_done for p in progress.values()),
        items_committed=sum(c.chunk_size for p in progress.values() for c in p.chunks),
        chunks_committed=sum(len(p.chunks) for p in progress.values()),
        shards=manifest.num_shards, shards_done=done, shards_in_progress=started, shards_pending=pending,
        leases=leases, fn=manifest.fn_name, started_at=manifest.created_at,
    )
    return report


def _print_status(report: dict) -> None:
    print(f"output:   {report['output_dir']}")
    state = report["state"]
    if state in ("complete", "empty"):
        print(f"state:    {state}" + (" (index.json published)" if report["published"] else " (nothing written yet)"))
        last = report.get("last_run")
        if last:
            print(f"last run: {last.get('items_added', 0):,} items added in {last.get('chunks_added', 0):,} chunks, "
                  f"{last.get('seconds', 0):.1f} s; dataset has {last.get('items', 0):,} items in "
                  f"{last.get('chunks', 0):,} chunks")
    else:
        total = report["inputs"]
        pct = 100.0 * report["inputs_done"] / total if total else 100.0
        print(f"state:    {state} (run {report['run_id'][:8]}, {report['mode']}, fn {report['fn']})")
        print(f"inputs:   {report['inputs_done']:,} of {total:,} done ({pct:.1f}%), "
              f"{report['items_committed']:,} items in {report['chunks_committed']:,} chunks committed")
        print(f"shards:   {len(report['shards_done'])} done, {len(report['shards_in_progress'])} in progress, "
              f"{len(report['shards_pending'])} pending (of {report['shards']})")
        for lease in report["leases"]:
            print(f"lease:    {lease['name']} held by {lease['host']} pid {lease['pid']}, heartbeat "
                  f"{lease['heartbeat_age_s']} s ago ({'live' if lease['live'] else 'stale'})")
        if state == "interrupted":
            print("resume:   rerun the same optimize() call")
    if report["failed_records"]:
        print(f"failed:   {report['failed_records']} failure record(s) under "
              f"{report['output_dir']}/{checkpoint.FAILED_PREFIX}")


def merge(output_dir: str, storage_options: dict | None = None) -> list[int]:
    """Publish index.json if every shard is done; returns the missing shards otherwise."""
    storage = open_storage(output_dir, storage_options)
    manifest = checkpoint.read_manifest(storage)
    if manifest is None:
        if storage.exists(checkpoint.INDEX_KEY):
            return []
        raise ShardwrightError(f"{storage.url} has no run to merge (no .shardwright/manifest.json)")
    published, missing = checkpoint.publish_if_complete(storage, manifest, {})
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardwright", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="what is done, in progress, pending and failed")
    status.add_argument("output_dir")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument("--storage-options", help="JSON dict of boto3 client arguments for s3:// outputs")
    merge_cmd = sub.add_parser("merge", help="publish index.json once every shard is done")
    merge_cmd.add_argument("output_dir")
    merge_cmd.add_argument("--storage-options", help="JSON dict of boto3 client arguments for s3:// outputs")
    try:
        from .slurm import add_slurm_command
    except ImportError:
        add_slurm_command = None
    if add_slurm_command is not None:
        add_slurm_command(sub)
    from .service.commands import add_service_commands  # serve, jobs (needs the service extra to run)

    add_service_commands(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "status":
            report = status_report(args.output_dir, _storage_options(args))
            if args.json:
                print(json.dumps(report, indent=1, default=str))
            else:
                _print_status(report)
            return 0
        if args.command == "merge":
            missing = merge(args.output_dir, _storage_options(args))
            if missing:
                print(f"not merged: {len(missing)} shard(s) are not finished: {missing[:20]}"
                      f"{' ...' if len(missing) > 20 else ''}; rerun the array tasks that own them", file=sys.stderr)
                return 1
            print(f"merged: {args.output_dir}/index.json is published")
            return 0
        return args.func(args)
    except ShardwrightError as exc:
        print(f"shardwright: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
