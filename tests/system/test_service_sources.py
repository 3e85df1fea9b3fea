"""A job whose inputs are a source, through the real HTTP server: read only under
--input-root (symbolic links resolved, checked again when the job starts), counted once the
job has listed it, and refused clearly otherwise."""

from __future__ import annotations

import os

import pytest

from shardwright import StreamingDataset
from support.service_server import Server

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("service-sources")
    for name in ("out", "raw", "secret"):
        (root / name).mkdir()
    for f in range(2):
        pq.write_table(pa.table({"id": list(range(f * 50, f * 50 + 50))}), str(root / "raw" / f"p{f}.parquet"))
    pq.write_table(pa.table({"id": [1]}), str(root / "secret" / "s.parquet"))
    os.symlink(root / "secret", root / "raw" / "escape")
    (root / "more" / "linked").mkdir(parents=True)
    os.symlink(root / "secret" / "s.parquet", root / "more" / "linked" / "l.parquet")
    srv = Server(
        root,
        "--output-root",
        str(root / "out"),
        "--input-root",
        str(root / "raw"),
        "--input-root",
        str(root / "more"),
        "--max-inputs",
        "1000",
    )
    srv.start()
    yield srv
    srv.stop()


def test_a_parquet_source_job_reads_under_its_input_root(server):
    with server.client() as client:
        job = server.submit(
            client,
            pipeline="echo",
            inputs={"source": "parquet", "url": str(server.root / "raw"), "columns": ["id"]},
            output_dir=str(server.root / "out" / "parquet"),
        )
        done = server.wait_state(client, job["id"], "SUCCEEDED", "FAILED", timeout=120)
        assert done["state"] == "SUCCEEDED", done
        assert done["progress"]["inputs_total"] == 100 and done["progress"]["inputs_done"] == 100
    ds = StreamingDataset(str(server.root / "out" / "parquet"))
    assert [ds[i]["i"]["id"] for i in range(len(ds))] == list(range(100))


@pytest.mark.parametrize(
    ("inputs", "status", "message"),
    [
        ({"source": "parquet", "url": "/etc"}, 403, "outside the allowed input roots"),
        ({"source": "parquet", "url": "RAW/escape"}, 403, "outside the allowed input roots"),  # a link out
        ({"source": "parquet", "url": "RAW/../secret"}, 422, "'..'"),
        ({"source": "parquet", "url": "RAW/*.parquet"}, 422, "put a glob in inputs.pattern"),
        ({"source": "excel", "url": "RAW"}, 422, "source"),
        ({"source": "parquet", "url": "RAW", "extra": 1}, 422, "extra"),
    ],
)
def test_sources_outside_the_roots_or_malformed_are_refused(server, inputs, status, message):
    inputs = {k: (v.replace("RAW", str(server.root / "raw")) if isinstance(v, str) else v) for k, v in inputs.items()}
    with server.client() as client:
        r = client.post(
            "/jobs", json={"pipeline": "echo", "inputs": inputs, "output_dir": str(server.root / "out" / "x")}
        )
    assert r.status_code == status, r.text
    assert message in r.text


def test_a_server_without_input_roots_reads_no_source(tmp_path):
    (tmp_path / "out").mkdir()
    srv = Server(tmp_path, "--output-root", str(tmp_path / "out")).start()
    try:
        with srv.client() as client:
            r = client.post(
                "/jobs",
                json={
                    "pipeline": "echo",
                    "inputs": {"source": "files", "url": str(tmp_path)},
                    "output_dir": str(tmp_path / "out" / "a"),
                },
            )
        assert r.status_code == 403 and "--input-root" in r.text, r.text
    finally:
        srv.stop()


def test_a_listed_file_linking_out_of_the_root_fails_the_job(server):
    with server.client() as client:
        job = server.submit(
            client,
            pipeline="echo",
            inputs={"source": "parquet", "url": str(server.root / "more" / "linked")},
            output_dir=str(server.root / "out" / "linked"),
        )
        done = server.wait_state(client, job["id"], "SUCCEEDED", "FAILED", timeout=120)
    # sources.parquet refuses a directory's file linking out of it (trust round 7) before the
    # service's own root check would
    assert done["state"] == "FAILED", done
    assert "through a symbolic link to" in done["error"]["message"] and "secret" in done["error"]["message"], done
    assert not (server.root / "out" / "linked" / "index.json").exists()
