"""What a call to ``optimize()`` does with the output it finds: a pure decision table.

``decide(observed, request)`` looks only at its arguments (what :func:`observe` read from the
output, and what the call asks for) and returns a :class:`RunPlan`, or raises the error the
user must see. The engine carries the plan out. Keeping the decision pure makes every case
a row of a test table (tests/unit/test_decide.py) instead of a path through I/O code.

=================================  ===========  ===============================================
output holds                       mode         plan
=================================  ===========  ===============================================
nothing (or only our state dir)    None/append  FRESH
an unfinished run (manifest)       None/append  RESUME if the same inputs, settings and fn
                                                configuration (allow_fn_config_change), else
                                                RunMismatchError naming the difference
... run without checkpoints        None/append  RESTART (discard its chunks, start it again)
... published but not cleaned up   any but ow.  FINISH_PUBLISH, then decide again
a dataset, from this same call     None/append  NOOP, or RETRY of its failed inputs
a dataset, from another call       None         DatasetExistsError
a dataset                          append       APPEND; DatasetExistsError when an earlier run
                                                added these same inputs (allow_repeated_append)
foreign chunk/index files only     None/append  OutputDirError
nothing                           incremental  FRESH
a recorded dataset                incremental  INCREMENTAL of the inputs not in it yet (NOOP
                                                when none); changed inputs: RunMismatchError
an unrecorded dataset (older, or  incremental  INCREMENTAL of the tail if its one run's inputs
litdata's)                                      are a prefix of these, else DatasetExistsError
an unfinished overwrite, same call overwrite    RESUME (a requeued array task keeps its peers' work)
anything else                      overwrite    OVERWRITE (wipe what we wrote, start fresh;
                                                other files in the folder are kept)
unreadable state or index          None/append  CorruptStateError; overwrite: OVERWRITE
=================================  ===========  ===============================================
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import CorruptStateError, DatasetExistsError, OutputDirError, RunMismatchError
from ..format import ChunkEntry, IndexConfig
from .fingerprint import InputsFingerprint
from .fn_identity import FnIdentity, describe_changes
from .hints import start_over_hint
from .identity import IdentityTable
from .incremental import input_kind, plan_incremental
from .layout import chunk_generation, is_our_chunk_name
from .manifest import Manifest, OutputSettings, changed_settings, describe_settings_change, is_published
from .recorded import Recorded
from .run_record import RunRecord


class PlanKind(enum.Enum):
    NOOP = "noop"  # the same call already finished: nothing to do
    FRESH = "fresh"  # a new run on an empty output
    RESUME = "resume"  # continue the interrupted run
    RESTART = "restart"  # discard an interrupted run that kept no checkpoints, and run it again
    RETRY = "retry"  # rerun the inputs the same call's finished run skipped (on_error="skip")
    APPEND = "append"  # a new run whose outputs follow the existing dataset's
    OVERWRITE = "overwrite"  # wipe what shardwright wrote, then a new run
    FINISH_PUBLISH = "finish_publish"  # a crash cut publishing short: finish its cleanup, decide again
    INCREMENTAL = "incremental"  # a new run of the inputs not in the dataset yet, appended to it


@dataclass(frozen=True)
class Observed:
    """What the output holds, as read by :func:`shardwright.protocol.observe.observe`."""

    url: str
    manifest: Manifest | None = None
    manifest_error: CorruptStateError | None = None  # the manifest, index or run record cannot be used
    index_chunks: tuple[ChunkEntry, ...] | None = None  # None: no index.json
    index_config: IndexConfig | None = None
    last_run: RunRecord | None = None  # run.json of the last finished run
    foreign_files: tuple[str, ...] = ()  # top-level chunk/index files with no run of ours
    records_readable: bool = True  # the manifest's records parse (only read for mode="overwrite")
    recorded: Recorded | None = None  # the dataset's recorded inputs (only read for mode="incremental")


@dataclass(frozen=True)
class Request:
    """What this optimize() call asks for."""

    mode: str | None  # None, "append" or "overwrite"
    inputs: InputsFingerprint
    settings: OutputSettings
    fn_name: str
    use_checkpoint: bool
    fn_code: str = ""  # digest of fn's code; "" when unknown
    input_files: dict | None = None  # InputFiles.to_json() of the inputs that are file paths
    fn_identity: FnIdentity | None = None  # name, code and configuration; None: compare name and code only
    allow_fn_config_change: bool = False  # resume although fn's configuration changed (optimize option)
    allow_repeated_append: bool = False  # append inputs an earlier run already added (optimize option)
    # False: settings.num_shards is the default for this call's workers, not the user's
    # choice, so a recorded run's count wins (runs created with another worker count, or
    # before the default changed, stay resumable and recognisable as the same call)
    explicit_num_shards: bool = True
    # mode="incremental": the identities of the call's inputs, and the fingerprint of its
    # first n inputs (an unrecorded dataset whose one run's inputs are a prefix of these)
    identities: IdentityTable | None = None
    prefix_fingerprint: Callable[[int], InputsFingerprint] | None = None

    def fn(self) -> FnIdentity:
        return self.fn_identity or FnIdentity(name=self.fn_name, code=self.fn_code)

    def settings_against(self, recorded_num_shards: object) -> OutputSettings:
        """This call's settings to compare with a recorded run's: with a defaulted
        num_shards, the recorded count (an int) stands in for ours."""
        if self.explicit_num_shards or type(recorded_num_shards) is not int:
            return self.settings
        return replace(self.settings, num_shards=recorded_num_shards)


@dataclass(frozen=True)
class RunPlan:
    kind: PlanKind
    manifest: Manifest | None = None  # RESUME / FINISH_PUBLISH: that run; RESTART: the run to discard
    generation: int = 0  # new runs: the generation of their chunk names
    manifest_mode: str = "create"  # new runs: the mode their manifest records
    base: tuple[tuple[ChunkEntry, ...], IndexConfig] | None = None  # new runs appending to a dataset
    input_ids: tuple[int, ...] | None = None  # RETRY (and its RESTART): the run-wide ids redone
    input_skips: tuple[int, ...] | None = None  # ... and their outputs committed before
    fn_changed_from: str | None = None  # RESUME with another fn: the recorded one (a warning)
    input_ranges: tuple[tuple[int, int], ...] | None = None  # INCREMENTAL: positions of the inputs to run
    range_skips: tuple[tuple[int, int], ...] = ()  # INCREMENTAL: (position, outputs already in) of retried ones
    # INCREMENTAL over an unrecorded one-run dataset: (its generation, its input count, its failed
    # [id, outputs] pairs), recorded with this call's identities before the run (protocol.identity)
    backfill: tuple[int, int, tuple[tuple[int, int], ...]] | None = None
    note: str = ""  # INCREMENTAL / NOOP of an incremental call: what was skipped or left, for the user


def next_generation(chunks: tuple[ChunkEntry, ...], last_run: RunRecord | None = None) -> int:
    """Above every generation in the index and the last finished run's (a run that added no
    chunk still recorded its inputs under its generation: see protocol.identity)."""
    last = last_run.data.get("generation") if last_run is not None else None
    above_last = last + 1 if type(last) is int and 0 <= last < 2**48 else 0
    return max(above_last, 1 + max(((chunk_generation(c.filename) or 0) for c in chunks), default=0))


def check_same_run(manifest: Manifest, request: Request, url: str) -> None:
    """Refuse to continue ``manifest``'s run with other inputs or output-shaping settings."""
    difference = InputsFingerprint.from_json(manifest.inputs).first_difference(request.inputs)
    if difference:
        raise RunMismatchError(
            f"inputs changed since the interrupted run in {url}: {difference}; "
            f"pass the same inputs to resume, {start_over_hint(manifest.mode, url)}"
        )
    changed = describe_settings_change(
        manifest.settings.to_json(), request.settings_against(manifest.settings.num_shards).to_json()
    )
    if changed is not None:
        what, rerun = changed
        raise RunMismatchError(
            f"settings changed since the interrupted run: {what}; "
            f"rerun with {rerun} to resume, {start_over_hint(manifest.mode, url)}"
        )


def _same_finished_call(last_run: RunRecord | None, request: Request) -> bool:
    return (
        last_run is not None
        and last_run.inputs == request.inputs.to_json()
        and last_run.settings is not None
        and last_run.settings == request.settings_against(last_run.settings.get("num_shards")).to_json()
        and last_run.fn_name == request.fn_name
    )


def _fn_changes(last_run: RunRecord, request: Request) -> str | None:
    """How fn changed since the finished run (its code, or its configuration named), or None."""
    recorded = last_run.fn
    config = request.fn().config_changes(recorded)
    if config:
        return f"its configuration changed since: {describe_changes(config)}"
    if request.fn().code_changed(recorded):
        return "its code changed since"
    return None


def _check_config_unchanged(manifest: Manifest, request: Request, url: str) -> None:
    """Resuming with another fn *configuration* would mix two in one dataset: refused unless
    the caller accepts it. A change of code alone (fix and resume) is not checked here."""
    changes = request.fn().config_changes(manifest.fn())
    if changes and not request.allow_fn_config_change:
        raise RunMismatchError(
            f"fn's configuration changed since the interrupted run in {url}: {describe_changes(changes)}; "
            "resuming would mix outputs of two configurations in one dataset. Rerun with the configuration it "
            f"started with, pass allow_fn_config_change=True to accept the mix, {start_over_hint(manifest.mode, url)}"
        )


def _check_same_kind(recorded: Recorded, request: Request, present: int, url: str) -> None:
    """The dataset's inputs were plain values and these are a source's rows (or back): none
    can match, so every one would be added again; refused, saying so."""
    assert request.identities is not None
    was, now = input_kind(recorded.tables), input_kind([request.identities])
    if present == 0 and was is not None and now is not None and was != now:
        raise RunMismatchError(
            f"the inputs in {url} were recorded as {was}, these are {now}: an input's identity is its value "
            "for a list and its file and row for a source, so none of these matches an input in the dataset "
            "and every one would be added again, even if the data is the same. Pass the inputs the way the "
            "dataset was made, mode='append' to add all of them on purpose, or mode='overwrite' to rebuild"
        )


def _check_not_in_dataset(seen: Observed, request: Request) -> None:
    """An append of inputs the dataset already holds (a superset or a permutation of earlier
    inputs), found through the recorded identities: refused, pointing to mode='incremental'."""
    recorded, table = seen.recorded, request.identities
    if request.allow_repeated_append or recorded is None or table is None or not recorded.generations:
        return
    plan = plan_incremental(recorded, table)
    if not plan.present:
        return
    new = sum(b - a for a, b in plan.new)
    first = _first_present(plan.new, table.count)
    names = table.names or []
    shown = f" ({names[first]})" if table.rows is None and first < len(names) else ""
    raise DatasetExistsError(
        f"{plan.present:,} of these {table.count:,} inputs are already in {seen.url} (the first: input "
        f"{first:,}{shown}); appending them would put each in the dataset twice. Pass mode='incremental' to "
        f"add only the {new:,} new one(s), allow_repeated_append=True to add them again on purpose, or append "
        "only inputs it does not hold"
    )


def _first_present(new: list[list[int]], count: int) -> int:
    """The first position not in the ranges ``new`` (sorted, disjoint)."""
    position = 0
    for a, b in new:
        if a > position:
            return position
        position = b
    return position if position < count else 0


def _check_not_added_before(last_run: RunRecord | None, request: Request, url: str) -> None:
    """An append of inputs an earlier run (the original one or an append) already added."""
    if last_run is None or request.allow_repeated_append:
        return
    if request.inputs.digest() in last_run.inputs_history:
        raise DatasetExistsError(
            f"{url} already holds the outputs of these same {request.inputs.count:,} inputs (added by an earlier "
            "run of this dataset); appending them again would put each in the dataset twice. Pass "
            "allow_repeated_append=True to add them again on purpose, or append only inputs it does not hold"
        )


def _exists_message(seen: Observed, request: Request, index: tuple[ChunkEntry, ...]) -> str:
    """A finished dataset of another call is there: what to do, never advising an append that
    would add inputs twice."""
    items = sum(c.chunk_size for c in index)
    last = seen.last_run
    if last is not None and last.mode in ("create", "overwrite"):
        finished = InputsFingerprint.from_json(last.inputs)
        if finished.prefix_of(request.inputs):
            n, m = finished.count, request.inputs.count
            return (
                f"{seen.url} holds the finished dataset of the first {n:,} of these {m:,} inputs; to add only the "
                f"{m - n:,} new ones pass mode='incremental' (or call with inputs[{n}:] and mode='append'; "
                f"mode='append' with all {m:,} would add the first {n:,} twice), or rebuild everything with "
                "mode='overwrite'"
            )
    return (
        # litdata's "HINT: ..." words kept, so code matching litdata's message still matches
        f"{seen.url} already holds a finished dataset ({items:,} items) made by another call. HINT: If you want "
        "to append/overwrite to the existing dataset, pass mode='incremental' to add only the inputs not in it "
        "yet, mode='append' with inputs it does not hold "
        "(inputs already in it would be there twice), or mode='overwrite' to replace it"
    )


def decide(seen: Observed, request: Request) -> RunPlan:
    """The plan for ``request`` on an output in state ``seen`` (see the module's table)."""
    if request.mode == "overwrite":
        return _decide_overwrite(seen, request)
    if seen.manifest_error is not None:
        raise seen.manifest_error
    manifest, index = seen.manifest, seen.index_chunks
    if manifest is not None and index is not None and is_published(index, manifest):
        return RunPlan(PlanKind.FINISH_PUBLISH, manifest=manifest)
    if manifest is not None:
        if not manifest.use_checkpoint or not request.use_checkpoint:
            base = None
            if manifest.base_config:
                base = (
                    tuple(ChunkEntry.from_json(c) for c in manifest.base_chunks),
                    IndexConfig.from_json(manifest.base_config),
                )
            return RunPlan(
                PlanKind.RESTART,
                manifest=manifest,
                generation=manifest.generation,
                manifest_mode=manifest.mode,
                base=base,
                input_ids=tuple(manifest.input_ids) if manifest.input_ids is not None else None,
                input_skips=tuple(manifest.input_skips) if manifest.input_skips is not None else None,
            )
        check_same_run(manifest, request, seen.url)
        _check_config_unchanged(manifest, request, seen.url)
        changed = manifest.fn_name if manifest.fn_name != request.fn_name else None
        if changed is None and manifest.fn_code and request.fn_code and manifest.fn_code != request.fn_code:
            changed = f"{manifest.fn_name} with other code"  # the fix-and-resume flow: a warning
        return RunPlan(PlanKind.RESUME, manifest=manifest, fn_changed_from=changed)
    if index is not None:
        assert seen.index_config is not None
        base_dataset = (index, seen.index_config)
        if request.mode == "incremental":
            return decide_incremental(seen, request, base_dataset)
        fn_change = _fn_changes(seen.last_run, request) if seen.last_run is not None else None
        if seen.last_run is not None and _same_finished_call(seen.last_run, request) and fn_change:
            # never a silent no-op: the dataset was made by another body or configuration of this fn
            if request.mode == "append":
                raise DatasetExistsError(
                    f"{seen.url}: the last run appended these same inputs with an earlier version of fn "
                    f"{request.fn_name} ({fn_change}); appending them again is not done twice. "
                    "Write to another output_dir, or rebuild everything with mode='overwrite' (this also "
                    "removes what earlier runs wrote)"
                )
            raise DatasetExistsError(
                f"{seen.url} holds the finished output of this call made with an earlier version of fn "
                f"{request.fn_name} ({fn_change}), so rerunning it would keep the old outputs. "
                "Pass mode='overwrite' to rebuild the dataset with the new fn, or write to another output_dir"
            )
        if _same_finished_call(seen.last_run, request):
            # The same call already finished (perhaps killed just after publishing): rerunning
            # it must not fail, and an append must not add its inputs twice. Inputs it skipped
            # (on_error="skip") are retried, their outputs appended.
            failed = seen.last_run.failed_inputs if seen.last_run is not None else ()
            if failed:
                return RunPlan(
                    PlanKind.RETRY,
                    generation=next_generation(index, seen.last_run),
                    manifest_mode="retry",
                    base=base_dataset,
                    input_ids=tuple(p[0] for p in failed),
                    input_skips=tuple(p[1] for p in failed),
                )
            return RunPlan(PlanKind.NOOP)
        if request.mode == "append":
            _check_not_added_before(seen.last_run, request, seen.url)
            _check_not_in_dataset(seen, request)
            return RunPlan(
                PlanKind.APPEND,
                generation=next_generation(index, seen.last_run),
                manifest_mode="append",
                base=base_dataset,
            )
        raise DatasetExistsError(_exists_message(seen, request, index))
    if seen.foreign_files:
        listed = ", ".join(seen.foreign_files)  # all of them: the user must see what is there
        ours = [f for f in seen.foreign_files if is_our_chunk_name(f)]
        deletes = f"it deletes only {', '.join(ours)}" if ours else "it deletes none of these files"
        raise OutputDirError(
            f"{seen.url} holds {listed} but no index.json and no shardwright run: a partial output of another "
            f"tool? Choose an empty output_dir, or pass mode='overwrite' to write the dataset next to them ({deletes})"
        )
    return RunPlan(PlanKind.FRESH)


def _decide_overwrite(seen: Observed, request: Request) -> RunPlan:
    """Wipe and start over, except to resume an interrupted overwrite of this same call (a
    requeued array task must not wipe its peers' work). Corrupt state is wiped too."""
    manifest = seen.manifest
    if (
        manifest is not None
        and seen.manifest_error is None
        and seen.records_readable
        and manifest.mode == "overwrite"
        and manifest.use_checkpoint
        and request.use_checkpoint
    ):
        try:
            check_same_run(manifest, request, seen.url)
        except RunMismatchError:
            pass
        else:
            return RunPlan(PlanKind.RESUME, manifest=manifest)
    return RunPlan(PlanKind.OVERWRITE, manifest_mode="overwrite")


def decide_incremental(seen: Observed, request: Request, base: tuple[tuple[ChunkEntry, ...], IndexConfig]) -> RunPlan:
    """mode="incremental" on a published dataset: run the inputs not in it yet (see the
    module table and protocol.identity)."""
    index, last_run = base[0], seen.last_run.data if seen.last_run is not None else {}
    recorded_fn = last_run.get("fn_name")
    change = _fn_changes(seen.last_run, request) if seen.last_run is not None else None
    if recorded_fn and (recorded_fn != request.fn_name or change):
        what = f"fn {recorded_fn}" if recorded_fn != request.fn_name else f"fn {recorded_fn} ({change})"
        raise RunMismatchError(
            f"{seen.url} was last written by {what}, this call runs {request.fn_name}: an incremental run would "
            "mix two fns' outputs. Rebuild it with mode='overwrite', or add these inputs with mode='append' "
            "if that is what you mean"
        )
    settings = last_run.get("settings")
    mine = {k: v for k, v in request.settings.to_json().items() if k != "num_shards"}  # shards may differ
    changed = describe_settings_change(settings, mine) if isinstance(settings, dict) else None
    if changed is not None and isinstance(settings, dict):
        keys = changed_settings(settings, mine)
        written = ", ".join(f"{k}={settings.get(k)!r}" for k in keys)
        passed = ", ".join(f"{k}={mine[k]!r}" for k in keys)
        raise RunMismatchError(
            f"{seen.url} was written with {written}, this call has {passed}; "
            f"rerun with {changed[1]} to add to it incrementally, or mode='overwrite' to rebuild"
        )
    assert request.identities is not None
    recorded = seen.recorded or Recorded([], [], [])
    generation = next_generation(index, seen.last_run)
    generations = {chunk_generation(c.filename) for c in index}
    if generations <= set(recorded.generations) and recorded.generations:
        plan = plan_incremental(recorded, request.identities)
        if plan.changed:
            names = request.identities.names or []
            shown = ", ".join(names[u] if u < len(names) else f"input {u:,}" for u in plan.changed[:5])
            more = f" and {len(plan.changed) - 5:,} more" if len(plan.changed) > 5 else ""
            every = plan.present == 0  # not one input matched: every recorded file differs at once
            why = (
                " Every file changed at once: if only sources.files(hash_contents=...) was switched since the "
                "dataset was made, their recorded identities differ though the files do not; rerun with the "
                "hash_contents the dataset was made with, or rebuild with mode='overwrite' to switch it."
                if every
                else ""
            )
            raise RunMismatchError(
                f"{len(plan.changed):,} input(s) changed since they were added to {seen.url}: {shown}{more}. "
                "Their old outputs are in the dataset; restore them, leave them out of the inputs, "
                f"or rebuild everything with mode='overwrite'.{why}"
            )
        _check_same_kind(recorded, request, plan.present, seen.url)
        notes = []
        if plan.removed:
            notes.append(f"{plan.removed:,} input(s) in the dataset are no longer among the inputs; their outputs stay")
        if not plan.new:
            notes.insert(0, f"nothing new: all {request.inputs.count:,} input(s) are already in {seen.url}")
            return RunPlan(PlanKind.NOOP, note="; ".join(notes))
        notes.insert(0, f"{plan.present:,} input(s) already in the dataset are skipped")
        return RunPlan(
            PlanKind.INCREMENTAL,
            generation=generation,
            manifest_mode="incremental",
            base=base,
            input_ranges=tuple((a, b) for a, b in plan.new),
            range_skips=plan.skips,
            note="; ".join(notes),
        )
    # Not recorded (an older shardwright's, or litdata's): only a dataset made by one run whose
    # inputs were a prefix of these can be extended, by the tail.
    inputs = last_run.get("inputs")
    count = inputs.get("count") if isinstance(inputs, dict) else None
    single_run = generations == {last_run.get("generation")} and last_run.get("mode") in ("create", "overwrite")
    if (
        single_run
        and type(count) is int
        and 0 < count <= request.inputs.count
        and request.prefix_fingerprint is not None
        and isinstance(inputs, dict)
        and InputsFingerprint.from_json(inputs) == request.prefix_fingerprint(count)
    ):
        if count == request.inputs.count:
            return RunPlan(PlanKind.NOOP, note=f"nothing new: the {count:,} input(s) are already in {seen.url}")
        return RunPlan(
            PlanKind.INCREMENTAL,
            generation=generation,
            manifest_mode="incremental",
            base=base,
            input_ranges=((count, request.inputs.count),),
            backfill=(
                int(last_run["generation"]),
                count,
                seen.last_run.failed_inputs if seen.last_run is not None else (),
            ),
            note=f"the dataset has no recorded input identities; its {count:,} inputs are a prefix of these, "
            "so the tail is appended",
        )
    raise DatasetExistsError(
        f"{seen.url} has no record of which inputs it holds (written by an older shardwright, by litdata, or by "
        "several runs before identities were recorded), and these inputs do not start with those of the run "
        "that wrote it; use mode='append' with exactly the new inputs, or rebuild it with mode='overwrite' "
        "(after which incremental runs work)"
    )
