"""Issue 33: a job is never served with the server's own credentials (docs/jobs.md), through
the real server and the S3 test server: a source whose storage_options hold an endpoint but
no keys is read anonymously (the bucket refuses it), and an output whose options name an
endpoint without the job's own keys is refused at submit (the server's keys would be used
to sign requests to a host the job chose)."""

from __future__ import annotations

import json

import pytest

from support.service_server import Server


@pytest.mark.s3
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_s3_jobs_never_get_the_servers_credentials(tmp_path, s3_server, s3_bucket):
    s3_server.client().put_object(
        Bucket=s3_bucket, Key="raw/a.jsonl", Body=b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(5))
    )
    (tmp_path / "out").mkdir()
    env = {  # the server's own credentials, in its environment
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": "us-east-1",
    }
    server = Server(
        tmp_path,
        "--output-root",
        str(tmp_path / "out"),
        "--output-root",
        f"s3://{s3_bucket}/out",
        "--input-root",
        f"s3://{s3_bucket}/raw",
        env=env,
    )
    server.start()
    source = {"source": "jsonl", "url": f"s3://{s3_bucket}/raw/"}
    endpoint_only = {"endpoint_url": s3_server.endpoint, "region_name": "us-east-1"}
    try:
        with server.client() as client:
            anonymous = server.submit(
                client,
                pipeline="echo",
                inputs=source,
                output_dir=str(tmp_path / "out" / "anonymous"),
                storage_options=endpoint_only,
            )
            own = server.submit(
                client,
                pipeline="echo",
                inputs=source,
                output_dir=str(tmp_path / "out" / "own"),
                storage_options=dict(s3_server.storage_options),
            )
            done = server.wait_state(client, anonymous["id"], "SUCCEEDED", "FAILED", timeout=150)
            assert done["state"] == "FAILED", done  # read unsigned: the bucket refuses it
            assert s3_server.secret_key not in json.dumps(done)
            done = server.wait_state(client, own["id"], "SUCCEEDED", "FAILED", timeout=150)
            assert done["state"] == "SUCCEEDED", done  # the job's own keys read it
            assert done["progress"]["inputs_total"] == 5
            refused = client.post(
                "/jobs",
                json={
                    "pipeline": "echo",
                    "inputs": [1, 2],
                    "output_dir": f"s3://{s3_bucket}/out/x",
                    "storage_options": endpoint_only,
                },
            )
            assert refused.status_code == 422, refused.text
            assert "endpoint_url names an endpoint" in refused.text and "own credentials" in refused.text
    finally:
        server.stop()
