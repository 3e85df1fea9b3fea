"""A Slurm array and the jobs service writing to Google Cloud Storage and Azure Blob
(fake-gcs-server and Azurite): every input exactly once, published once, and the Azure
account key never in a response, a log, a job record or Slurm's script."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from shardwright import StreamingDataset
from shardwright.cli.main import main as cli
from shardwright.cluster import slurm as sw_slurm
from support.cloudemulators import AZURITE_KEY
from support.service_server import Server

HERE = Path(__file__).resolve().parent
JOB = HERE.parent / "support" / "slurm_job.py"
SRC = HERE.parent.parent / "src"


def _cloud(request, name: str) -> tuple[str, dict, dict]:
    """(fresh url, storage_options, environment a job needs) of one emulator."""
    url = request.getfixturevalue(f"{name}_url")
    server = request.getfixturevalue(f"{name}_server")
    if name == "gcs":
        return url, {}, dict(server.env)
    # Azure credentials the way a cluster's users have them: in the job's environment
    return url, dict(server.storage_options), {"AZURE_STORAGE_CONNECTION_STRING": server.connection_string}


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param("gcs", marks=pytest.mark.gcs), pytest.param("azure", marks=pytest.mark.azure)]
)
def test_slurm_array_writes_every_input_exactly_once(slurm_cluster, request, name, tmp_path):
    url, options, job_env = _cloud(request, name)
    reports, logs = tmp_path / "reports", tmp_path / "logs"
    logs.mkdir()
    inputs = 120
    command = [sys.executable, str(JOB), url, "--inputs", str(inputs), "--sleep", "0.01", "--chunk-size", "4",
               "--report-dir", str(reports)]  # fmt: skip
    script = sw_slurm.write_sbatch_script(command, 3, log_dir=str(logs), chdir=str(tmp_path), job_name=f"sw-{name}")
    assert AZURITE_KEY not in script
    env = slurm_cluster.env
    env.update(job_env)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    job = sw_slurm.submit(script, env=env)
    tasks = slurm_cluster.wait_job(job, timeout=120)
    explain = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("*.log")))
    assert all(t.state == "COMPLETED" and t.exit_code == 0 for t in tasks.values()), f"{tasks}\n{explain}"
    assert [int(x["i"]) for x in StreamingDataset(url, storage_options=options)] == list(range(inputs))
    publishes = (reports / "publish.log").read_text().splitlines()
    assert len(publishes) == 1, publishes
    reports_json = [json.loads(p.read_text()) for p in sorted(reports.glob("task*.json"))]
    assert sorted(r["rank"] for r in reports_json) == [0, 1, 2] and all(r["ok"] for r in reports_json)
    assert cli(["status", url, "--storage-options", json.dumps(options)]) == 0


def _everything_on_disk(root) -> bytes:
    data = b""
    for base, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(base, name), "rb") as f:
                data += f.read()
    return data


@pytest.mark.gcs
@pytest.mark.azure
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_service_writes_to_both_clouds_and_never_shows_the_key(
    tmp_path, gcs_server, gcs_bucket, azure_server, azure_container
):
    gs_root, az_root = f"gs://{gcs_bucket}", f"az://{azure_container}"
    azure_options = azure_server.storage_options
    srv = Server(tmp_path, "--output-root", gs_root, "--output-root", az_root).start()
    try:
        with srv.client() as c:
            jobs = {
                f"{gs_root}/a": srv.submit(c, pipeline="echo", inputs=list(range(25)), output_dir=f"gcs://{gcs_bucket}/a",
                                           options={"chunk_size": 4, "num_workers": 2}),
                f"{az_root}/b": srv.submit(c, pipeline="echo", inputs=list(range(25)), output_dir=f"{az_root}/b",
                                           storage_options=azure_options, options={"chunk_size": 4, "num_workers": 2}),
            }  # fmt: skip
            refused = c.post("/jobs", json={"pipeline": "echo", "inputs": [1], "output_dir": "gs://elsewhere/x"})
            assert refused.status_code == 403 and "outside the allowed output roots" in refused.text, refused.text
            for job in jobs.values():
                done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", timeout=120)
                assert done["state"] == "SUCCEEDED", done
            texts = [c.get("/jobs").text] + [
                c.get(f"/jobs/{j['id']}{p}").text for j in jobs.values() for p in ("", "/logs")
            ]
            for text in texts:
                assert AZURITE_KEY not in text and "AccountKey" not in text, text[:2000]
        for url, options in ((f"{gs_root}/a", {}), (f"{az_root}/b", azure_options)):
            ids = sorted(int(x["i"]) for x in StreamingDataset(url, storage_options=options))
            assert ids == list(range(25)), url
        assert AZURITE_KEY.encode() not in _everything_on_disk(srv.db.parent)
        assert AZURITE_KEY not in srv.log.read_text()
    finally:
        srv.stop()
