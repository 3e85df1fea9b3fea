"""The reader's entry points never show a secret: opening, item reads, iteration (with its
prefetch) and the loader, against the real S3 server and an unreachable endpoint (issue 14 BAD 1)."""

from __future__ import annotations

import re
import traceback

import pytest

from shardwright import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset, optimize
from support.helpers import assert_attempts_are_the_failed_requests

KEY, SECRET = "AKIDUSERPART77", "SECRETPASSWORDPART99"


def _full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _assert_clean(exc: BaseException) -> None:
    text = _full_text(exc)
    assert KEY not in text and SECRET not in text, text


def _with_userinfo(endpoint: str) -> str:
    scheme, rest = endpoint.split("://", 1)
    return f"{scheme}://{KEY}:{SECRET}@{rest}"


def test_unreachable_endpoint_with_credentials_in_url_is_redacted(tmp_path):
    options = {
        "endpoint_url": f"http://{KEY}:{SECRET}@127.0.0.1:1",
        "aws_access_key_id": "x" * 8,
        "aws_secret_access_key": "y" * 8,
        "retry_timeout": 2,
    }
    with pytest.raises(OSError) as info:
        StreamingDataset("s3://bucket/prefix", storage_options=options, cache_dir=str(tmp_path / "c"))
    _assert_clean(info.value)


def sample(i: int) -> dict:
    return {"i": i, "blob": bytes(100)}


@pytest.fixture
def remote_dataset(s3_url, s3_storage_options):
    optimize(
        sample, list(range(40)), s3_url, chunk_size=10, num_workers=1, storage_options=s3_storage_options, verbose=False
    )
    return s3_url


def test_open_of_a_missing_prefix_on_the_real_server_is_redacted(s3_bucket, s3_server, tmp_path):
    options = dict(s3_server.storage_options, endpoint_url=_with_userinfo(s3_server.endpoint))
    with pytest.raises(Exception) as info:
        StreamingDataset(f"s3://{s3_bucket}/nothing-here", storage_options=options, cache_dir=str(tmp_path / "c"))
    _assert_clean(info.value)


def test_item_reads_iteration_and_loader_of_a_broken_dataset_are_redacted(remote_dataset, fault_proxy, tmp_path):
    # Through the proxy, with credentials in the endpoint's URL; then the endpoint goes away
    # under the open reader: every read path fails with that URL in its chain.
    options = dict(fault_proxy.storage_options, endpoint_url=_with_userinfo(fault_proxy.endpoint), retry_timeout=2)
    ds = StreamingDataset(remote_dataset, storage_options=options, cache_dir=str(tmp_path / "c"))
    assert ds[0]["i"] == 0
    # First the endpoint keeps failing: the one retry budget bounds the whole read, by count
    # (botocore's own retries nested in ours once made it 33 s): each attempt the error
    # reports is one GET of its chunk the proxy failed (the reader's prefetch of the next
    # chunk fails beside it, on its own object), no more than retry_timeout=2 allows
    fault_proxy.configure(p_503=1.0, methods={"GET"})
    with pytest.raises(Exception) as info:
        ds[25]
    _assert_clean(info.value)
    text = _full_text(info.value)
    chunk = re.search(r"GET s3://\S+/(chunk-[^/\s]+\.bin) at ", text)
    assert chunk, text
    assert_attempts_are_the_failed_requests(text, fault_proxy.failed("503", "GET", chunk.group(1)))
    fault_proxy.stop()
    with pytest.raises(Exception) as info:
        ds[25]
    _assert_clean(info.value)
    with pytest.raises(Exception) as info:
        list(iter(ds))
    _assert_clean(info.value)
    with pytest.raises(Exception) as info:
        list(StreamingDataLoader(ds, batch_size=4))
    _assert_clean(info.value)
    with pytest.raises(Exception) as info:
        list(CombinedStreamingDataset([ds, ds], weights=[1, 1]))
    _assert_clean(info.value)
