"""The Azure backend's download_to on Azurite (storage/azure_stream.py, issue 36): each GET's
body goes into the file as it arrives, ranges beyond the first are pinned to the first one's
etag, and every size the service announced is checked."""

from __future__ import annotations

import gzip
import os
import tracemalloc

import pytest
from azure.storage.blob import BlobServiceClient

from shardwright.storage import azure_stream, open_storage
from shardwright.storage.cloud import TruncatedBody
from support.faultproxy import FaultProxy

pytestmark = pytest.mark.azure

_MiB = 1024 * 1024


def test_download_never_holds_the_body_whole(azure_url, azure_storage_options, tmp_path):
    """A 24 MiB blob is fetched without a buffer of its size: the SDK's download joined each
    GET's body into one bytes object (and wrote a copy of it), which cost the cold reader more
    CPU than the bytes (fresh pages); streamed, Python holds about one 1 MiB piece at a time."""
    s = open_storage(azure_url, azure_storage_options)
    data = os.urandom(24 * _MiB)
    s.write_bytes("big", data)
    dst = tmp_path / "big"
    s.download_to("big", str(dst))  # the client and its connection exist before the count
    dst.unlink()
    tracemalloc.start()
    try:
        s.download_to("big", str(dst))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert dst.read_bytes() == data
    assert peak < 6 * _MiB, f"download_to held {peak / _MiB:.1f} MiB of Python memory for a 24 MiB blob"


def test_download_in_ranges_and_an_empty_blob(azure_url, azure_storage_options, tmp_path, monkeypatch):
    """Several ranged GETs put together byte for byte; an empty blob (its ranged GET gets 416)
    becomes an empty file; a missing blob is missing."""
    monkeypatch.setattr(azure_stream, "GET_SPAN", _MiB)  # 1 MiB ranges: 4 GETs for 3.5 MiB
    s = open_storage(azure_url, azure_storage_options)
    data = os.urandom(3 * _MiB + _MiB // 2)
    s.write_bytes("ranged", data)
    s.write_bytes("empty", b"")
    s.download_to("ranged", str(tmp_path / "ranged"))
    assert (tmp_path / "ranged").read_bytes() == data
    s.download_to("empty", str(tmp_path / "empty"))
    assert (tmp_path / "empty").read_bytes() == b""
    with pytest.raises(FileNotFoundError):
        s.download_to("absent", str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()


def test_a_blob_stored_encoded_downloads_as_stored(azure_server, azure_container, tmp_path):
    """A blob another tool stored with Content-Encoding gzip comes back as stored, at once (the
    sizes the service announces count the stored bytes; the SDK's download decoded it and the
    size check then failed on every retry until the budget ran out)."""
    from azure.storage.blob import ContentSettings

    stored = gzip.compress(b"hello " * 1000)
    blob = azure_server.client().get_blob_client(azure_container, "data/zipped")
    blob.upload_blob(stored, content_settings=ContentSettings(content_encoding="gzip"))
    s = open_storage(f"az://{azure_container}/data", dict(azure_server.storage_options, retry_timeout=5))
    s.download_to("zipped", str(tmp_path / "zipped"))
    assert (tmp_path / "zipped").read_bytes() == stored


class _ReplacedMidway:
    """A file that overwrites the blob (same size, new etag) once the second range arrives."""

    def __init__(self, f, replace):
        self.f, self.replace, self.replaced = f, replace, False

    def tell(self) -> int:
        return self.f.tell()

    def write(self, piece: bytes) -> int:
        if not self.replaced and self.f.tell() >= _MiB:
            self.replaced = True
            self.replace()
        return self.f.write(piece)


def test_a_blob_replaced_between_ranges_is_fetched_again(azure_server, azure_container, tmp_path, monkeypatch):
    """Ranges after the first carry If-Match of the first one's etag: a blob replaced in between
    is never stitched from two versions (TruncatedBody: the retry loop fetches it again)."""
    monkeypatch.setattr(azure_stream, "GET_SPAN", _MiB)
    blob = azure_server.client().get_blob_client(azure_container, "data/moving")
    old, new = os.urandom(3 * _MiB), os.urandom(3 * _MiB)
    blob.upload_blob(old)
    with open(tmp_path / "out", "wb") as f:
        target = _ReplacedMidway(f, lambda: blob.upload_blob(new, overwrite=True))
        with pytest.raises(TruncatedBody, match="replaced"):
            azure_stream.fetch_blob(blob, target)
    assert target.replaced
    s = open_storage(f"az://{azure_container}/data", azure_server.storage_options)
    s.download_to("moving", str(tmp_path / "again"))
    assert (tmp_path / "again").read_bytes() == new


@pytest.fixture
def proxy(azure_server):
    proxy = FaultProxy(azure_server.endpoint.split("://", 1)[1], seed=int.from_bytes(os.urandom(4), "little")).start()
    try:
        yield proxy
    finally:
        proxy.stop()


def test_a_body_cut_short_is_fetched_again(azure_server, azure_container, proxy, tmp_path):
    """A reply cut after 1.5 MiB of a 4 MiB body: a TruncatedBody (retried, never a status
    error) from the GET, and download_to fetches it again into a whole file."""
    data = os.urandom(4 * _MiB)
    azure_server.client().get_blob_client(azure_container, "data/cut").upload_blob(data)
    proxied = {"connection_string": azure_server.connection_string.replace(azure_server.endpoint, proxy.endpoint)}
    s = open_storage(f"az://{azure_container}/data", proxied)
    proxy.configure(next_faults=["truncate"], truncate_after=_MiB + _MiB // 2)
    blob = BlobServiceClient.from_connection_string(proxied["connection_string"], retry_total=0)
    with open(tmp_path / "once", "wb") as f, pytest.raises(TruncatedBody, match="cut short|got"):
        azure_stream.fetch_blob(blob.get_blob_client(azure_container, "data/cut"), f)
    assert proxy.stats["truncate"] == 1
    proxy.configure(next_faults=["truncate"])
    s.download_to("cut", str(tmp_path / "whole"))
    assert proxy.stats["truncate"] == 2
    assert (tmp_path / "whole").read_bytes() == data
