"""``GET /metrics`` of a real ``shardwright serve`` scraped during and after a job that writes to
the real S3 server through the fault proxy (503s and connection resets on PUTs): the counters
equal the ground truth. Committed items = the dataset's length; PUTs = what the proxy saw (and,
less the answers it withheld after sending them on, what the S3 server was sent and applied);
store retries = the faults the proxy injected."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.service_server import Server


def scrape(srv: Server) -> dict[tuple[str, tuple], float]:
    r = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {srv.token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items()))


def puts(samples: dict, outcome: str | None = None) -> float:
    """Requests sent as HTTP PUTs: plain writes and conditional ones ("PUT if absent", ...)."""
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == "shardwright_store_requests_total"
        and dict(ls)["verb"].startswith("PUT")
        and outcome in (None, dict(ls)["outcome"])
    )


def store_retries(samples: dict) -> float:
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == "shardwright_run_retries_total" and dict(ls)["cause"].startswith("store")
    )


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_metrics_during_and_after_a_chaos_run_equal_the_ground_truth(tmp_path, s3_bucket, fault_proxy):
    from shardwright import StreamingDataset
    from shardwright.storage import open_storage

    n, gate = 400, tmp_path / "gate"
    output = f"s3://{s3_bucket}/chaos"
    fault_proxy.configure(methods={"PUT"}, p_503=0.12, p_reset=0.08)
    srv = Server(tmp_path, "--pipelines", "support.service_gated").start()
    try:
        with srv.client() as c:
            job = srv.submit(
                c,
                pipeline="gated_after",
                config={"gate": str(gate), "free": 40},
                inputs=list(range(n)),
                output_dir=output,
                storage_options=fault_proxy.storage_options,
                options={"chunk_size": 10, "num_workers": 2},
            )
            live = ("shardwright_job_items", (("job", job["id"]), ("pipeline", "gated_after"), ("state", "RUNNING")))
            during = srv.wait(c, job["id"], lambda j: j["progress"]["items"] >= 20, 120, "first chunks committed")
            assert during["state"] == "RUNNING"
            mid = scrape(srv)  # the workers wait on the gate: the run is half-way, its counters live
            assert 0 < mid[live] < n and puts(mid) > 0
            gate.touch()
            done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", timeout=240)
            assert done["state"] == "SUCCEEDED", done
        after = scrape(srv)
        proxy = dict(fault_proxy.stats)
        fault_proxy.clear()
        length = len(StreamingDataset(output, storage_options=fault_proxy.storage_options))
        index = json.loads(open_storage(output, fault_proxy.storage_options).read_bytes("index.json"))
    finally:
        srv.stop()
    assert done["attempts"] == 1, "no fault reached the job: every one was retried inside the run"
    assert after[("shardwright_items_total", ())] == length == n
    assert after[("shardwright_chunks_committed_total", ())] == len(index["chunks"])
    assert after[("shardwright_bytes_written_total", ())] == sum(ch["chunk_bytes"] for ch in index["chunks"])
    faults = proxy.get("503 PUT", 0) + proxy.get("reset PUT", 0) + proxy.get("reset_after PUT", 0)
    assert faults > 0, proxy
    assert store_retries(after) == faults, (proxy, after)
    ours = {ls: v for (n_, ls), v in after.items() if n_ == "shardwright_store_requests_total"}
    assert puts(after) == proxy["requests PUT"], (proxy, ours)
    assert puts(after, "ok") == proxy["upstream PUT"] - proxy.get("reset_after PUT", 0), (proxy, ours)
    for name in ("shardwright_store_requests_total", "shardwright_run_retries_total", "shardwright_items_total"):
        assert total(mid, name) <= total(after, name), name
