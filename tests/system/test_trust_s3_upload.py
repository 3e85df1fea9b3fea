"""Uploads to S3 carry a checksum the server verifies: a body damaged in flight is refused by
the real server (SeaweedFS) and retried, never stored damaged."""

from __future__ import annotations

import os

import pytest

from shardwright.storage import open_storage


def test_server_refuses_a_wrong_checksum(s3_server, s3_bucket):
    client = s3_server.client()
    with pytest.raises(Exception, match="BadDigest"):
        client.put_object(Bucket=s3_bucket, Key="x", Body=b"hello world" * 10, ChecksumCRC32="AAAAAA==")


@pytest.mark.parametrize("botocore_default", ["when_supported", "when_required"])
@pytest.mark.parametrize("size", [50_000, 6 * 1024 * 1024])
def test_a_body_flipped_in_flight_is_refused_and_retried_never_stored(
    fault_proxy, s3_bucket, size, botocore_default, monkeypatch
):
    # "when_required": botocore computes no checksum unless asked; shardwright always asks.
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", botocore_default)
    options = dict(
        fault_proxy.storage_options, multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024
    )
    storage = open_storage(f"s3://{s3_bucket}/p", options)
    data = os.urandom(size)
    fault_proxy.configure(methods={"PUT"}, next_faults=["corrupt_body"])
    storage.write_bytes("chunk-0-00000-000000.bin", data)
    assert fault_proxy.stats["corrupt_body"] == 1, "the fault was injected"
    assert storage.read_bytes("chunk-0-00000-000000.bin") == data
