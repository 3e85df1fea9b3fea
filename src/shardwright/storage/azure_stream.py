"""How the Azure backend downloads a blob into a file (storage/azure.py's ``download_to``):
ranged GETs sent by the SDK, each body streamed into the file as it arrives (issue 36)."""

from __future__ import annotations

import re
from typing import Any

from .cloud import TruncatedBody

__all__ = ["GET_SPAN", "StreamInto", "Streamed", "fetch_blob"]

_MiB = 1024 * 1024
GET_SPAN = 32 * _MiB  # bytes per ranged GET (the SDK's own first GET asks as many): one GET per chunk


class Streamed(Exception):  # not an error: how StreamInto hands its result back
    """Raised by :class:`StreamInto` once a body is in the file, so that the SDK reads nothing more."""

    def __init__(self, total: int, etag: str):
        super().__init__(total, etag)
        self.total, self.etag = total, etag


class StreamInto:
    """The ``cls`` of a ``download_blob``: writes the reply's body into ``f`` as it arrives (1 MiB
    pieces: the client's connection_data_block_size), checks its length, and raises
    :class:`Streamed` with the blob's size and etag."""

    def __init__(self, f: Any):
        self.f = f

    def __call__(self, pipeline_response: Any, body: Any, _headers: Any) -> None:
        from azure.core.exceptions import AzureError

        headers = pipeline_response.http_response.headers
        announced = headers.get("Content-Length")
        content_range = headers.get("Content-Range")
        etag = headers.get("ETag")
        if announced is None or etag is None:
            raise TruncatedBody("download reply without Content-Length or ETag: fetching again")
        m = re.fullmatch(r"bytes \d+-\d+/(\d+)", (content_range or "").strip())
        if m is None:  # every GET asks for a range: its reply says which, and of how many bytes
            raise TruncatedBody(f"download reply with Content-Range {content_range!r}: fetching again")
        total = int(m.group(1))
        start = self.f.tell()
        try:
            for piece in body:
                self.f.write(piece)
        except AzureError as e:  # a reset or a body cut short (azure-core checks the length)
            raise TruncatedBody(f"download cut short: {type(e).__name__}") from e
        except ConnectionError as e:
            raise TruncatedBody(f"download cut short: {type(e).__name__}") from e
        if self.f.tell() - start != int(announced):
            raise TruncatedBody(f"got {self.f.tell() - start} of {announced} bytes")
        raise Streamed(total, str(etag))


def fetch_blob(blob: Any, f: Any) -> int | None:
    """The blob of ``blob`` (a BlobClient) written into ``f`` by ranged GETs of up to 32 MiB,
    each body streamed in 1 MiB pieces: its size, None when it is missing.

    The SDK's own download reads each GET's body whole into one joined bytes object and
    writes a sliced copy of it: two fresh 16 MiB buffers per chunk, which cost the cold
    reader more CPU than the bytes themselves (issue 36's profile). So the body is taken
    from the SDK's response as it arrives, through ``cls`` (the SDK's hook that is handed
    the raw response): the request, its auth, its error mapping (404, ContainerNotFound,
    5xx) stay the SDK's and the retries ours. What the SDK checked is checked here: the
    Content-Range of every reply, each body's length against its Content-Length, and
    every range after the first pinned to the first one's etag (a blob replaced
    meanwhile is fetched again from the start). A 416 on the first range is an empty blob."""
    from azure.core import MatchConditions
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    total: int | None = None
    etag = None
    while total is None or f.tell() < total:
        start = f.tell()
        span = GET_SPAN if total is None else min(GET_SPAN, total - start)
        # decompress=False: the bytes as stored, which Content-Length and Content-Range count
        # (a chunk is never stored with a Content-Encoding; the reader checks what it reads)
        kwargs: dict[str, Any] = {"offset": start, "length": span, "max_concurrency": 1, "decompress": False}
        kwargs["cls"] = StreamInto(f)
        if total is not None:  # later ranges: only from the blob the first one read
            kwargs.update(etag=etag, match_condition=MatchConditions.IfNotModified)
        try:
            blob.download_blob(**kwargs)
        except Streamed as got:
            got_total, etag = got.total, got.etag
        except ResourceNotFoundError as e:
            if "ContainerNotFound" in str(getattr(e, "error_code", "") or ""):
                raise
            return None
        except HttpResponseError as e:
            status = getattr(e, "status_code", None)
            if status == 412:  # replaced since the first range: start again
                raise TruncatedBody("blob replaced during its download: fetching again") from e
            if status == 416 and total is None:  # no byte 0: an empty blob
                return 0
            raise
        else:
            raise TruncatedBody("the download returned no body")  # cls always raises: never here
        if total is None:
            total = got_total
        elif got_total != total:
            raise TruncatedBody(f"blob size changed from {total} to {got_total} during its download")
        if f.tell() == start and start < total:
            raise TruncatedBody(f"empty range at {start} of {total} bytes")
    return total
