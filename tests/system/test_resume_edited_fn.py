"""A run killed mid-document with SIGKILL, then resumed with fn's code edited (a fix; a changed
*configuration* is refused earlier unless allow_fn_config_change=True, as mixing two configs)
(issue 32): an input whose kept outputs end at its ResumePoint resumes by state
(``fn(x, resume=state)``), so the edited fn is allowed; a fn without ResumePoints would resume an
interrupted document by position (its kept outputs dropped from the new fn's stream), so the
edited fn is refused, naming the document, before anything is written.

Each test waits on events (a progress snapshot holding a document mid-way, the child's exit),
never sleeps.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

from shardwright.protocol.progress import decode_snapshot
from support.helpers import HERE, child_env, kill_group, wait_for
from support.inflight_child import expected
from support.teacher import Teacher

CHILD = str(HERE / "inflight_child.py")
HOLD_AFTER = 10  # teacher calls answered before the rest are held until the kill


def run_child(out: str, url: str, mode: str, *edited: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, CHILD, out, url, mode, "4", "0.2", *edited],
        env=child_env(),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def mid_document(out: str) -> list:
    """The unfinished inputs with outputs in the shards' progress snapshots."""
    found = []
    for path in glob.glob(os.path.join(out, ".shardwright", "progress", "*.bin")):
        try:
            with open(path, "rb") as f:
                snapshot = decode_snapshot(f.read())
        except (OSError, ValueError):
            continue  # being replaced
        found.extend(s for s in snapshot.slots if not s.done and s.items)
    return found


def kill_mid_document(out: str, teacher: Teacher, mode: str) -> None:
    """Run until the teacher holds its calls past ``HOLD_AFTER`` (10 answers of 4-page documents:
    one is certainly mid-way, at any load) and a snapshot shows it; SIGKILL; release the teacher."""
    proc = run_child(out, teacher.url, mode)
    try:
        assert wait_for(lambda: mid_document(out) or proc.poll() is not None, 120), "no document was mid-way"
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        kill_group(proc)  # SIGKILL, the main process and its workers at once
        proc.communicate(timeout=60)
        teacher.release()  # the next runs' calls are answered
    assert mid_document(out), "the kill found no document mid-way"


def read_pages(out: str) -> list[tuple[int, int]]:
    from shardwright import StreamingDataset

    ds = StreamingDataset(out)
    return [(ds[i]["doc"], ds[i]["page"]) for i in range(len(ds))]


def test_an_edited_fn_resumes_documents_killed_mid_way_from_their_resume_points(tmp_path):
    out = str(tmp_path / "out")
    with Teacher(latency=0.3, hold_after=HOLD_AFTER) as teacher:
        kill_mid_document(out, teacher, "asyncgen")
        assert all(s.point is not None and s.point_outputs == s.base + len(s.items) for s in mid_document(out))
        proc = run_child(out, teacher.url, "asyncgen", "edited")
        _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    assert read_pages(out) == expected("asyncgen")  # every page once, in input order


def test_an_edited_fn_is_refused_where_a_document_would_resume_by_position(tmp_path):
    out = str(tmp_path / "out")
    with Teacher(latency=0.3, hold_after=HOLD_AFTER) as teacher:
        kill_mid_document(out, teacher, "nopoints")
        before = sorted(os.listdir(out))
        proc = run_child(out, teacher.url, "nopoints", "edited")
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode != 0
        assert "RunMismatchError" in stderr and "fn's code changed" in stderr, stderr[-3000:]
        assert "output(s) of the old fn kept" in stderr and "allow_fn_config_change=True" in stderr
        assert sorted(os.listdir(out)) == before
        finish = run_child(out, teacher.url, "nopoints")  # the fn it started with resumes
        _, stderr = finish.communicate(timeout=180)
    assert finish.returncode == 0, stderr[-3000:]
    assert read_pages(out) == expected("nopoints")
