"""A parquet source over a real Slurm job array (tests/support/slurm_cluster.py): every task
builds the same source from its metadata, runs its share of the shards, and the dataset
holds every row exactly once, in order."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from shardwright import StreamingDataset
from shardwright.cluster import slurm as sw_slurm

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HERE = Path(__file__).resolve().parents[1]  # tests/
CHILD = HERE / "support" / "sources_child.py"
SRC = HERE.parent / "src"


@pytest.mark.slurm
def test_a_parquet_source_over_a_job_array(slurm_cluster, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(3):
        pq.write_table(
            pa.table({"id": list(range(f * 80, f * 80 + 80))}), str(raw / f"p{f}.parquet"), row_group_size=25
        )
    out, logs = tmp_path / "out", tmp_path / "logs"
    logs.mkdir()
    config = {
        "kind": "parquet",
        "path": str(raw),
        "output_dir": str(out),
        "num_workers": 1,
        "chunk_size": 7,
        "sleep": 0.01,
    }
    script = sw_slurm.write_sbatch_script(
        [sys.executable, str(CHILD), json.dumps(config)], 3, log_dir=str(logs), chdir=str(tmp_path), job_name="sw-src"
    )
    env = slurm_cluster.env
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    job = sw_slurm.submit(script, env=env)
    tasks = slurm_cluster.wait_job(job, timeout=120)
    explain = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("*.log")))
    assert all(t.state == "COMPLETED" and t.exit_code == 0 for t in tasks.values()), f"{tasks}\n{explain}"
    ds = StreamingDataset(str(out))
    assert [ds[i]["id"] for i in range(len(ds))] == list(range(240)), explain
