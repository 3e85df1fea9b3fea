"""Opening a call's run on its output: what the call asks (``make_request``), the output
opened and checked, and ``decide``'s plan carried out (the manifest created or resumed),
with the inputs' bookkeeping around it. The driver (``engine/driver.py``) calls these once
for every executor."""

from __future__ import annotations

import logging
import os

from ..errors import UsageError
from ..format import ChunkEntry, IndexConfig
from ..protocol.claim import claim_format
from ..protocol.decide import PlanKind, Request, RunPlan, check_same_run, decide
from ..protocol.fn_identity import FnIdentity
from ..protocol.layout import INDEX_KEY
from ..protocol.links import check_no_links
from ..protocol.manifest import Manifest, create_manifest, new_manifest
from ..protocol.observe import observe
from ..protocol.publish import discard_run_state, finish_published, wipe
from ..protocol.shards import clamp_num_shards
from ..storage import Storage, open_storage
from .inputs import RunInputs, backfill_identities, record_identities
from .options import OptimizeOptions

log = logging.getLogger("shardwright")


def make_request(identity: FnIdentity, inputs: RunInputs, options: OptimizeOptions, num_nodes: int = 1) -> Request:
    """What this call asks of the output (compared with what is there by ``decide``), once
    the inputs' state is loaded (``inputs.load_state``). ``identity``: fn's, computed once
    per call (``driver.call_identity``)."""
    incremental = options.mode == "incremental"
    return Request(
        mode=options.mode,
        inputs=inputs.fingerprint(),
        settings=options.output_settings(len(inputs)),
        explicit_num_shards=options.num_shards is not None,
        fn_name=identity.name,
        use_checkpoint=options.use_checkpoint,
        fn_code=identity.code,
        input_files=inputs.input_files(),
        identities=inputs.identities() if incremental or options.mode == "append" else None,
        prefix_fingerprint=inputs.prefix_fingerprint() if incremental else None,
        fn_identity=identity,
        allow_fn_config_change=options.allow_fn_config_change,
        allow_repeated_append=options.allow_repeated_append,
    )


def open_output(output_dir: str | os.PathLike[str], options: OptimizeOptions) -> Storage:
    storage = open_storage(output_dir, options.storage_options, create=True)
    storage.check()  # wrong credentials, a missing bucket or a dead endpoint: fail now, clearly
    check_no_links(storage)  # before the first write: never follow a link out of the output
    return storage


def check_shared_output(storage: Storage, options: OptimizeOptions, nodes: str) -> None:
    """A local output_dir on several machines is a dataset split over their disks: refused
    unless the user says every node sees the same directory."""
    if not storage.shared_across_processes:
        raise UsageError(f"output_dir {storage.url} lives in one process; {nodes} cannot share it")
    if storage.local_path(INDEX_KEY) is not None and not options.engines.shared_output:
        raise UsageError(
            f"output_dir {storage.url} is a local path, and {nodes} would each write their own disk's copy; "
            "write to a bucket URL (s3://...), or pass shared_output=True if every node mounts this same "
            "directory (NFS, Lustre)"
        )


def open_call(storage: Storage, request: Request, inputs: RunInputs, notes: list[str]) -> tuple[Manifest, bool] | None:
    """:func:`open_run` with the checks and bookkeeping around it that every driver does
    (the local engine, an executor's driver): a changed source file is named first, the
    inputs' identities and a source's state are recorded, a resume checks input files."""
    inputs.check_unchanged(storage)  # names a source's file, before decide's general mismatch
    opened = open_run(storage, request, notes)
    if opened is None:
        return None
    manifest, resumed = opened
    record_identities(storage, manifest, inputs, created=not resumed, table=request.identities)
    inputs.save_state(storage)
    if resumed:
        inputs.check_files(storage, manifest, storage.url)
    return manifest, resumed


def open_run(storage: Storage, request: Request, notes: list[str] | None = None) -> tuple[Manifest, bool] | None:
    """Carry out :func:`decide`'s plan: returns (the manifest to run, whether it is a resume),
    or None when the same call already finished (or, incremental, nothing is new). What the
    user should know of the plan (inputs skipped, left) is logged and added to ``notes``."""
    while True:
        seen = observe(storage, read_records=request.mode == "overwrite", read_identities=bool(request.identities))
        plan = decide(seen, request)
        if plan.kind is not PlanKind.FINISH_PUBLISH:
            break
        # a crash during publishing: index.json is out, the cleanup was not finished
        assert plan.manifest is not None and seen.index_chunks is not None
        finish_published(storage, plan.manifest, list(seen.index_chunks), request.fn())
    if plan.note:
        log.warning("%s", plan.note)
        if notes is not None:
            notes.append(plan.note)
    if plan.kind is PlanKind.NOOP:
        log.info("%s already holds the output of this same call; nothing to do", storage.url)
        return None
    if plan.kind is PlanKind.RESUME:
        assert plan.manifest is not None
        if plan.fn_changed_from:
            log.warning(
                "fn changed since the interrupted run (%s, now %s); resuming with the new fn",
                plan.fn_changed_from,
                request.fn_name,
            )
        if plan.manifest.mode == "overwrite":
            log.info("resuming the interrupted overwrite of %s", storage.url)
        return plan.manifest, True
    if plan.kind is PlanKind.RESTART:  # a run without checkpoints can't be resumed: start it over
        assert plan.manifest is not None
        discard_run_state(storage, plan.manifest.generation)
    elif plan.kind is PlanKind.OVERWRITE:
        wipe(storage)
    elif plan.backfill is not None:  # the dataset's one run, recorded with this call's identities
        backfill_identities(storage, plan.backfill, request)
    elif plan.kind is PlanKind.RETRY:
        log.warning("retrying %d input(s) that failed in the previous run of this call", len(plan.input_ids or ()))
    return _create(storage, request, plan)


def _create(storage: Storage, request: Request, plan: RunPlan) -> tuple[Manifest, bool]:
    base_chunks: tuple[ChunkEntry, ...] = plan.base[0] if plan.base else ()
    base_config: IndexConfig | None = plan.base[1] if plan.base else None
    count = len(plan.input_ids) if plan.input_ids is not None else request.inputs.count
    if plan.input_ranges is not None:
        count = sum(b - a for a, b in plan.input_ranges)
    wanted = new_manifest(
        generation=plan.generation,
        mode=plan.manifest_mode,
        num_inputs=count,
        num_shards=clamp_num_shards(request.settings.num_shards, count),
        inputs=request.inputs.to_json(),
        input_ids=plan.input_ids,
        input_skips=plan.input_skips,
        settings=request.settings,
        use_checkpoint=request.use_checkpoint,
        base_chunks=base_chunks,
        base_config=base_config,
        fn_name=request.fn_name,
        fn_code=request.fn_code,
        input_files=request.input_files,
        fn_identity=request.fn(),
        input_ranges=plan.input_ranges,
        range_skips=plan.range_skips,
    )
    manifest = create_manifest(storage, wanted)
    resumed = False
    if manifest.run_id != wanted.run_id:  # another node created it first
        check_same_run(manifest, request, storage.url)
        resumed = True
    if manifest.base_config and manifest.base_config.get("data_format"):  # appended samples: the same format
        config = manifest.base_config
        claim_format(storage, manifest.run_id, config["data_format"], config["data_spec"], -1)
    return manifest, resumed
