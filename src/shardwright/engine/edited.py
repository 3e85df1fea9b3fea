"""Input files edited between an interrupted run and its resume (issue 32 item 8).

The run records the size and modification time of every input that is a path to a file
(``InputFiles``, in the manifest). On resume, an edited file is a conflict only when the run
already committed outputs of that input (from the old content): it is refused, naming the
file and the safe ways on. An edited file whose input has no committed output yet is not a
conflict: the run goes on and reads the new content, and the files as they are now are kept
with the run's state (``.shardwright/sources/inputfiles-index-*.json``), so the next resume
compares against them, not against the content no output came from.

On the host that recorded the files, size and mtime are compared; on another host (a node
with its own copies, another pod) sizes alone, since mtimes of copies differ.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence

from ..errors import RunMismatchError
from ..names import display_name
from ..process import host_identity
from ..protocol.fingerprint import InputFiles
from ..protocol.hints import start_over_hint
from ..protocol.jsonio import read_state
from ..protocol.layout import source_state_key
from ..protocol.manifest import Manifest
from ..protocol.records import load_progress
from ..storage import Storage

__all__ = ["check_input_files", "source_file_changed"]

log = logging.getLogger("shardwright")


def _accepted_key(run_id: str) -> str:
    return source_state_key(f"inputfiles-index-{hashlib.blake2b(run_id.encode(), digest_size=8).hexdigest()}.json")


def _recorded(storage: Storage, manifest: Manifest) -> tuple[InputFiles | None, str | None]:
    """The files as the run last accepted them (an earlier resume's), else as the manifest has them."""
    try:
        data = json.loads(read_state(storage, _accepted_key(manifest.run_id), "accepted input files"))
        if isinstance(data, dict) and data.get("run_id") == manifest.run_id:
            return InputFiles.from_json(data), data.get("host")
    except (FileNotFoundError, ValueError):
        pass
    files = manifest.input_files or {}
    return (InputFiles.from_json(files) if files else None), files.get("host")


def committed_inputs(storage: Storage, manifest: Manifest, ids: Sequence[int] | None) -> set[int]:
    """Positions of the call's inputs some of whose outputs the run committed (``ids``: the
    run's input ids by position, None when positions are the ids)."""
    runs: list[tuple[int, int]] = []
    for p in load_progress(storage, manifest.shard_bounds(), manifest.run_id, sealed=manifest.records_sealed).values():
        end = p.end if p.done else p.next_input + (1 if p.skip_outputs else 0)
        if end > p.start:
            runs.append((p.start, end))
    out: set[int] = set()
    for a, b in runs:
        out.update(range(a, b) if ids is None else (int(ids[i]) for i in range(a, b)))
    return out


def check_input_files(
    storage: Storage, manifest: Manifest, inputs: Sequence, url: str, ids: Sequence[int] | None = None
) -> None:
    """Refuse a resume over an edited input file the run already committed outputs of
    (``ids``: as :func:`committed_inputs`)."""
    recorded, host = _recorded(storage, manifest)
    if recorded is None:
        return
    same_host = host == host_identity()
    if not same_host and not recorded.size_hashes:
        return  # recorded before sizes were kept apart: comparable only on the host that recorded them
    now = InputFiles.of(inputs, recorded.block_size)
    blocks = recorded.changed_blocks(now, len(inputs), same_host=same_host)
    if not blocks:
        return
    committed = committed_inputs(storage, manifest, ids)
    for first, last in blocks:
        edited = InputFiles.modified_since(inputs, first, last, manifest.created_at) if same_host else []
        suspects = edited or list(range(first, last + 1))
        hit = [i for i in suspects if i in committed]
        if hit:
            i = hit[0]
            which = f"input {i:,} ({display_name(inputs[i])})" if edited or first == last else None
            what = which or f"an input file between input {first:,} and {last:,}"
            raise RunMismatchError(
                f"{what} changed since the interrupted run in {url} started (size or modification time), and the "
                "run already committed outputs of it from the old content. To go on safely: restore the file and "
                "rerun to resume; or keep the new content under a new path and add it later (mode='incremental' "
                f"or 'append') once this run finished; {start_over_hint(manifest.mode, url)}"
            )
    names = ", ".join(display_name(inputs[i]) for i in (edited or [])[:3])
    log.info("input file(s) %s changed since the run started; none of their outputs was committed yet", names or "")
    if now is not None:
        record = {**now.to_json(), "host": host_identity(), "run_id": manifest.run_id}
        storage.write_bytes(_accepted_key(manifest.run_id), json.dumps(record).encode())


def source_file_changed(
    storage: Storage, manifest: Manifest, name: str, first: int, rows: int, ids: Sequence[int] | None
) -> RunMismatchError:
    """The refusal of a resume over a source whose file ``name`` (the call's inputs
    ``first..first+rows``) changed since the run started: a source's files are part of the
    run's identity, so it cannot resume over the new content; the message says whether outputs
    of the old content were committed, and so which way on is safe."""
    committed = committed_inputs(storage, manifest, ids)
    done = sum(1 for i in range(first, first + rows) if i in committed)
    url = storage.url
    if done:
        what = (
            f"and the run already committed outputs of {done:,} of its row(s) from the old content. "
            "Restore the file to resume; or keep the new content under a new name and add it later "
            "(mode='incremental') once this run finished"
        )
    else:
        what = (
            "but no output of it was committed yet, so nothing of the old content is in the run: abandon the "
            f"run with `shardwright clean {url}` and rerun to start from the new content (the work committed from "
            "other files is redone), or restore the file to resume"
        )
    return RunMismatchError(
        f"input file {name} changed since the interrupted run in {url} started (its size, etag, generation or "
        f"modification time differ), {what}; {start_over_hint(manifest.mode, url)}"
    )
