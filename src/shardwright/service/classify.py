"""The HTTP status the jobs API answers an error with: the service's only addition to the one
classification table (:data:`shardwright.errors.ERROR_CLASSIFICATION` says whose error it is and
whether it is transient; :class:`~shardwright.service.model.JobError` carries both to the API)."""

from __future__ import annotations

from .. import errors
from .store import StoreFullError

#: Nearest class wins (a class's MRO is searched in order); anything else is 500.
HTTP_STATUS: dict[type[BaseException], int] = {
    StoreFullError: 507,
    errors.RunMismatchError: 409,
    errors.DatasetExistsError: 409,
    errors.SampleFormatError: 422,
    errors.UsageError: 400,
    errors.IncompleteDatasetError: 409,
    errors.DatasetNotFoundError: 404,
    errors.IncompleteRunError: 409,
    errors.ConcurrentRunError: 409,
    errors.FnError: 422,
    errors.UnsupportedFormatError: 415,
    errors.CorruptStateError: 500,
    errors.StorageError: 503,
    errors.WorkerDiedError: 500,
    errors.LeaseLostError: 409,
    errors.ShardwrightError: 500,
}


def http_status(exc: BaseException | type[BaseException]) -> int:
    cls = exc if isinstance(exc, type) else type(exc)
    for base in cls.__mro__:
        if base in HTTP_STATUS:
            return HTTP_STATUS[base]
    return 500
