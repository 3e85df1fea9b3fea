"""What went wrong with an object store, said once for every backend.

Each backend answers :meth:`~shardwright.storage.cloud.CloudStorage.failure` (``exception ->
Failure``) from its SDK's exception types and codes, and carries its fixes as data
(:class:`Fixes`); the retry loop decides by the answer (TRANSIENT: retried; UNREACHABLE:
retried once the service has answered in this process, as a connection that worked before is
a blip) and :func:`storage_error` writes the one line the user sees. Models: gcsfs's
``retry.py`` tables, mosaicml-streaming's per-cloud downloaders over one base.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..errors import StorageError

__all__ = ["RETRY_STATUS", "Failure", "Fixes", "kept_failing", "storage_error"]

#: HTTP statuses worth another try on every object store (gcsfs's table, and S3's and Azure's).
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class Failure(enum.Enum):
    """The kinds of final failure an object store has, each with its own fix."""

    MISSING = "missing"  # no such object (a listing or a check that finds nothing: no bucket)
    NO_CREDENTIALS = "no credentials"  # none found, or none usable (a token endpoint that fails)
    REJECTED = "rejected"  # credentials the service refuses (401/403)
    NO_BUCKET = "no bucket"  # the bucket or container does not exist
    WRONG_REGION = "wrong region"  # the bucket is in another region than the client asks (S3)
    UNREACHABLE = "unreachable"  # no connection (a wrong endpoint, unless it answered before)
    TRANSIENT = "transient"  # throttling, 5xx, resets, bodies cut short: retried
    OTHER = "other"  # anything else: the SDK's own words (or the exception itself)


@dataclass(frozen=True)
class Fixes:
    """How one backend's messages name things, and the fix for each kind of failure."""

    service: str  # "S3", "GCS", "Azure"
    container: str  # "bucket" or "container"
    fixes: dict[Failure, str] = field(default_factory=dict)
    credentials: str = ""  # whose credentials: "AWS", "Google Cloud", "Azure" (default: the service)

    def fix(self, kind: Failure) -> str:
        return self.fixes.get(kind, "")


def kept_failing(service: str, where: str, endpoint: str, elapsed: float, attempts: int, last: str) -> StorageError:
    """The error once an operation's retries ran out: how long, how often, the last failure."""
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
    return StorageError(
        f"{service} {where} at {endpoint} kept failing for {elapsed:.0f} s ({tries}, last: {last}): the network or "
        "the service is unstable; rerun the same call to resume"
    )


def storage_error(
    kind: Failure,
    fixes: Fixes,
    *,
    where: str,
    endpoint: str,
    name: str,
    url: str,
    detail: str | None,
    error_type: str,
    attempts: int,
    elapsed: float,
) -> StorageError | None:
    """The one line for a final failure of ``kind`` during ``where`` (op and object), on the
    bucket or container ``name`` at ``endpoint``; ``detail`` is the service's own words (None:
    not the service's error, so there is nothing to say: the caller raises it as it is)."""
    what, service = fixes.container, fixes.service
    fix = fixes.fix(kind)
    if kind is Failure.NO_CREDENTIALS:
        return StorageError(f"no {fixes.credentials or service} credentials found for {url}: {fix}")
    if kind is Failure.REJECTED:
        return StorageError(
            f"credentials rejected by {endpoint} for {what} {name} ({detail or error_type}; during {where}): {fix}"
        )
    if kind is Failure.NO_BUCKET:
        return StorageError(f"{what} {name} does not exist at {endpoint}: create it or fix the URL ({url})")
    if kind is Failure.WRONG_REGION:
        return StorageError(f"{what} {name} is in another region than the client uses at {endpoint}: {fix}")
    if kind is Failure.UNREACHABLE:
        return StorageError(f"cannot reach the {service} endpoint {endpoint} for {what} {name} ({error_type}): {fix}")
    if kind is Failure.TRANSIENT:
        return kept_failing(service, where, endpoint, elapsed, attempts, detail or error_type)
    if detail is None:
        return None
    return StorageError(f"{service} {where} at {endpoint} failed: {detail}".rstrip())
