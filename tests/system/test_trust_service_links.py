"""Issue 33: links swapped under a *running* service job (a real HTTP server, real files):
the output directory, the engine's own .shardwright/shards and a listed input file; and
output directories of another user."""

from __future__ import annotations

import json
import os
import pwd

import pytest

from support.service_server import Server

pytestmark = pytest.mark.timeout(240)


def _start(tmp_path, *args: str) -> Server:
    return Server(tmp_path, "--pipelines", "support.service_gated", *args).start()


def _wait_file(srv: Server, client, job_id: str, path) -> None:
    srv.wait(client, job_id, lambda job: os.path.exists(path) or job["state"] in ("FAILED", "SUCCEEDED"), 120)
    assert os.path.exists(path), srv.job(client, job_id)


def _everything_under(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


@pytest.mark.parametrize("swap", ["output_dir", ".shardwright/shards"])
def test_a_running_jobs_output_swapped_for_a_link_receives_nothing(tmp_path, swap):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    started, gate = tmp_path / "started", tmp_path / "gate"
    srv = _start(tmp_path, "--output-root", str(root))
    try:
        with srv.client() as c:
            job = srv.submit(
                c,
                pipeline="gated",
                inputs=list(range(8)),
                output_dir=str(root / "ds"),
                config={"started": str(started), "gate": str(gate)},
                options={"chunk_size": 1, "num_workers": 1},
            )
            _wait_file(srv, c, job["id"], started)  # running: its .shardwright/ is there
            moved = root / "moved"
            if swap == "output_dir":
                os.rename(root / "ds", moved)
                (root / "ds").symlink_to(outside, target_is_directory=True)
            else:
                shards = root / "ds" / ".shardwright" / "shards"
                shards.mkdir(parents=True, exist_ok=True)
                os.rename(shards, moved)
                shards.symlink_to(outside, target_is_directory=True)
            gate.touch()
            done = srv.wait_state(c, job["id"], "FAILED", "SUCCEEDED", timeout=180)
        assert done["state"] == "FAILED", done
        assert "replaced by a symbolic link while the job ran" in json.dumps(done), done
        assert _everything_under(outside) == []  # not one chunk, record or lock out there
    finally:
        srv.stop()


def test_a_listed_file_swapped_for_a_link_while_the_job_runs_is_never_read(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    out.mkdir()
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"SERVICE-ACCOUNT-KEY")
    for name in ("a.bin", "b.bin", "c.bin"):
        (raw / name).write_bytes(b"public " + name.encode())
    started, gate = tmp_path / "started", tmp_path / "gate"
    srv = _start(tmp_path, "--output-root", str(out), "--input-root", str(raw))
    try:
        with srv.client() as c:
            job = srv.submit(
                c,
                pipeline="gated",
                inputs={"source": "files", "url": str(raw)},
                output_dir=str(out / "ds"),
                config={"started": str(started), "gate": str(gate)},
                options={"chunk_size": 1, "num_workers": 1},
            )
            _wait_file(srv, c, job["id"], started)  # the start check is behind it
            os.unlink(raw / "b.bin")
            (raw / "b.bin").symlink_to(secret)
            gate.touch()
            done = srv.wait_state(c, job["id"], "FAILED", "SUCCEEDED", timeout=180)
        assert done["state"] == "FAILED", done
        assert "b.bin was replaced by a symbolic link after it was listed" in json.dumps(done), done
        for d, _, fs in os.walk(out):
            for f in fs:
                assert b"SERVICE-ACCOUNT-KEY" not in open(os.path.join(d, f), "rb").read()
    finally:
        srv.stop()


def test_an_output_directory_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534) if os.getuid() == 0 else pytest.skip("needs root to chown")
    others = [e for e in pwd.getpwall() if e.pw_uid != os.getuid() and e.pw_dir.startswith("/home/")]
    srv = _start(tmp_path)
    try:
        with srv.client() as c:
            r = c.post("/jobs", json={"pipeline": "echo", "inputs": [1], "output_dir": str(theirs)})
            assert r.status_code == 403 and "is owned by another user" in r.text, r.text
            if others:
                home = others[0].pw_dir
                r = c.post("/jobs", json={"pipeline": "echo", "inputs": [1], "output_dir": f"{home}/ds"})
                assert r.status_code == 403 and f"home directory of user {others[0].pw_name}" in r.text, r.text
    finally:
        srv.stop()
