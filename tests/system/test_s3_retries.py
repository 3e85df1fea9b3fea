"""The S3 backend's one retry budget (botocore's own retries are off), through the fault proxy
in front of the real S3 server answering as an overloaded S3 does: every attempt is one
request of ours, and throttling (429) is retried like 503. That ``retry_timeout`` bounds a
persistent failure is test_storage.py's ``test_s3_gives_up_with_clear_error_when_server_keeps_failing``."""

from __future__ import annotations

import pytest

from shardwright.storage import open_storage

BODY = b"the object's bytes"


@pytest.mark.parametrize("refusal", ["429", "503"])
def test_throttling_is_retried_one_request_an_attempt(fault_proxy, s3_bucket, refusal):
    storage = open_storage(f"s3://{s3_bucket}/p", fault_proxy.storage_options)
    storage.write_bytes("k", BODY)
    fault_proxy.stats.clear()
    fault_proxy.configure(methods={"GET"}, next_faults=[refusal] * 3)
    assert storage.read_bytes("k") == BODY
    assert fault_proxy.stats[refusal] == 3 and fault_proxy.stats["requests"] == 4, dict(fault_proxy.stats)
