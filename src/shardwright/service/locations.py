"""Where a job may write: checked when it is submitted (the API answers 422/403) and again by
the job process when it starts (a directory swapped for a symbolic link while the job was
queued is refused then), with the same function.

Without ``--output-root`` the service still refuses ``/``, the home directory, system
directories, any directory that holds or is inside the service's own state (its store,
token and job files): an ``overwrite`` job there would delete them, and a directory the
service user does not own or that is inside another user's home directory.

While a job runs its local output directory is held (:mod:`shardwright.storage.pin`).

A cloud output is written with the job's ``storage_options`` or, without credentials in
them, the server's own (its environment, profile or role: docs/jobs.md). The server's
credentials go only to the endpoint the server itself is set up for: a job whose options
name an endpoint (S3 ``endpoint_url``, GCS ``api_endpoint``, Azure ``account_url``) brings
its own credentials with it (:func:`check_output_credentials`), or the server would sign
requests to, or hand a token to, a host the job chose.
"""

from __future__ import annotations

import os
import pwd

from ..errors import OutputDirError, UsageError
from ..storage import Location, parse_location

# the directories themselves and everything under them
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
)
# only the directories themselves (datasets under them are common)
SYSTEM_DIRS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var")


class LocationRefused(UsageError):
    """An output location the service does not write to; ``status`` is the HTTP answer."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


def _segments_problem(path: str) -> str | None:
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part in (".", ".."):
            return f"has a {part!r} segment"
        if part == "" and 0 < i < len(parts) - 1:
            return "has an empty segment ('//')"
    return None


def _parse(output_dir: str) -> Location:
    """The storage registry's one check of a location (schemes, buckets, //, ., .., NUL)."""
    try:
        return parse_location(output_dir)
    except OutputDirError as exc:
        raise LocationRefused(f"output_dir: {exc}") from None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _normalize_path(output_dir: str) -> str:
    if not os.path.isabs(output_dir):
        raise LocationRefused(
            f"output_dir: {output_dir!r} is relative; give an absolute path (jobs do not run in your working directory)"
        )
    problem = _segments_problem(output_dir.rstrip("/") or "/")
    if problem:
        raise LocationRefused(f"output_dir: {output_dir!r} {problem}; write the path without it")
    return os.path.realpath(output_dir)


def check_output_location(output_dir: str, roots: tuple[str, ...], state_dirs: tuple[str, ...]) -> str:
    """The normalized location (symbolic links resolved), or LocationRefused naming the problem."""
    location = _parse(output_dir)
    if not location.is_local:
        normalized = location.url
    else:
        normalized = _normalize_path(location.prefix)
        for state in state_dirs:
            real = os.path.realpath(state)
            if _inside(normalized, real) or _inside(real, normalized):
                raise LocationRefused(
                    f"output_dir: {output_dir} holds or is inside the service's own state ({state}); write elsewhere",
                    403,
                )
        if not roots:
            home = os.path.realpath(os.path.expanduser("~"))
            if normalized in SYSTEM_DIRS or normalized == home or any(_inside(normalized, t) for t in SYSTEM_TREES):
                raise LocationRefused(
                    f"output_dir: {output_dir} is {'your home' if normalized == home else 'a system'} directory; "
                    "write to a directory of its own (the operator can allow places with --output-root)",
                    403,
                )
            problem = _not_ours(normalized)
            if problem:
                raise LocationRefused(
                    f"output_dir: {output_dir} {problem}; write to a directory this service's user owns "
                    "(the operator can allow places with --output-root)",
                    403,
                )
    if roots and not any(_inside(normalized, _root(r)) for r in roots):
        raise LocationRefused(
            f"output_dir: {output_dir} is outside the allowed output roots ({', '.join(roots)}); write under one of them",
            403,
        )
    return normalized


S3_KEYS = ("aws_access_key_id", "aws_secret_access_key")
AZURE_KEYS = ("connection_string", "account_key", "sas_token", "credential")
# per scheme: the options that choose where requests go, and whether the job's own credentials are there
_ENDPOINTS = {"s3": ("endpoint_url",), "gs": ("api_endpoint",), "gcs": ("api_endpoint",)}
_ENDPOINTS.update({s: ("account_url",) for s in ("az", "abfs", "abfss")})


def has_own_s3_credentials(options: dict | None) -> bool:
    """Whether S3 ``storage_options`` carry the job's own keys (else boto3 finds the server's)."""
    return bool(options) and all(isinstance(options.get(k), str) and options.get(k) for k in S3_KEYS)  # type: ignore[union-attr]


def _has_own_credentials(scheme: str, options: dict) -> bool:
    if scheme == "s3":
        return has_own_s3_credentials(options)
    if scheme in ("gs", "gcs"):
        return options.get("credentials") is not None
    return any(options.get(k) for k in AZURE_KEYS)


def check_output_credentials(output_dir: str, storage_options: dict | None) -> None:
    """LocationRefused when a cloud output's options name an endpoint without the job's own
    credentials: the server's would be sent to the job's endpoint (see the module)."""
    scheme = output_dir.split("://", 1)[0].lower() if "://" in output_dir else ""
    options = storage_options or {}
    named = [k for k in _ENDPOINTS.get(scheme, ()) if options.get(k)]
    if named and not _has_own_credentials(scheme, options):
        own = {"s3": " and ".join(S3_KEYS), "gs": "credentials", "gcs": "credentials"}.get(
            scheme, " or ".join(AZURE_KEYS)
        )
        raise LocationRefused(
            f"storage_options: {named[0]} names an endpoint for {output_dir} without the job's own credentials; "
            f"this server sends its own credentials only to the endpoint it is set up for: send {own} with it, "
            f"or leave {named[0]} out"
        )


def _not_ours(path: str) -> str | None:
    """Why ``path`` belongs to another user (None: it does not): an existing directory owned
    by someone else, or a place inside another user's home directory."""
    uid = os.getuid()
    try:
        owner = os.stat(path).st_uid
    except OSError:
        owner = None
    if owner is not None and owner != uid:
        return f"is owned by another user (uid {owner})"
    for entry in pwd.getpwall():
        home = os.path.realpath(entry.pw_dir) if entry.pw_dir else "/"
        if entry.pw_uid == uid or home in SYSTEM_DIRS or any(_inside(home, t) for t in SYSTEM_TREES):
            continue
        if _inside(path, home):
            return f"is inside the home directory of user {entry.pw_name}"
    return None


def _root(root: str) -> str:
    return parse_location(root).url if "://" in root else os.path.realpath(root)


__all__ = ["LocationRefused", "check_output_credentials", "check_output_location", "has_own_s3_credentials"]
