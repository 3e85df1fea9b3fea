"""Jobs writing to a real S3 server (SeaweedFS, tests/conftest_s3.py) with credentials in
storage_options: they reach the job, and never a response, a log or the store."""

from __future__ import annotations

import os

import pytest

from support.service_server import Server


def _everything_on_disk(root) -> bytes:
    data = b""
    for base, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(base, name), "rb") as f:
                data += f.read()
    return data


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_s3_jobs_use_their_credentials_and_never_show_or_store_them(tmp_path, s3_url, s3_storage_options):
    from shardwright import StreamingDataset

    secret = s3_storage_options["aws_secret_access_key"]
    wrong = "wrong-secret-0123456789"
    srv = Server(tmp_path, "--auto-retries", "1", "--retry-backoff", "0.2").start()
    try:
        with srv.client() as c:
            good = srv.submit(
                c,
                pipeline="echo",
                inputs=list(range(30)),
                output_dir=s3_url,
                storage_options=s3_storage_options,
                options={"chunk_size": 4, "num_workers": 2},
            )
            bad = srv.submit(
                c,
                pipeline="echo",
                inputs=list(range(5)),
                output_dir=s3_url + "-bad",
                storage_options=dict(s3_storage_options, aws_secret_access_key=wrong),
            )
            done = srv.wait_state(c, good["id"], "SUCCEEDED", "FAILED", timeout=90)
            assert done["state"] == "SUCCEEDED", done
            assert done["storage_options"] == {k: "***" for k in s3_storage_options}
            failed = srv.wait_state(c, bad["id"], "FAILED", "SUCCEEDED", timeout=90)
            assert failed["state"] == "FAILED", failed
            # wrong credentials: a storage error is a system error, retried once automatically
            assert failed["error"]["kind"] == "system" and failed["error"]["type"] == "StorageError", failed["error"]
            assert failed["attempts"] == 2 and failed["attempt_history"][1]["trigger"] == "auto-retry"
            texts = [c.get("/jobs").text] + [
                c.get(f"/jobs/{j['id']}{p}").text for j in (good, bad) for p in ("", "/logs")
            ]
            for text in texts:
                assert secret not in text and wrong not in text
        ids = sorted(int(x["i"]) for x in StreamingDataset(s3_url, storage_options=s3_storage_options))
        assert ids == list(range(30))
        on_disk = _everything_on_disk(srv.db.parent)
        assert secret.encode() not in on_disk and wrong.encode() not in on_disk
        log = srv.log.read_text()
        assert secret not in log and wrong not in log
    finally:
        srv.stop()
