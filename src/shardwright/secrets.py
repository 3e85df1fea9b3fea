"""Secrets: never in a message, a traceback, a record file, a job record or a generated script.

The one home of what counts as a secret and how it is hidden. Every layer that can print,
store or pass on text that may hold a credential uses these functions: the engine (failure
records, errors raised by optimize), the reader (errors raised while opening or reading a
dataset), the CLI (its one-line errors), the Slurm helpers (command lines Slurm keeps) and the
jobs service (job records and logs).

What is a secret:

* the value of a ``storage_options`` key in :data:`SECRET_OPTION_KEYS` (boto3's credential
  names, Google's and Azure's, and fsspec's names, which are refused anyway), at any depth;
* the ``user:password@`` part of a URL value (an ``endpoint_url`` or an ``account_url``);
* the ``AccountKey=`` / ``SharedAccessSignature=`` parts of an Azure connection string, and
  the whole string;
* environment variables named like a secret (``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``,
  ``*CREDENTIAL*``, ``*ACCESS_KEY*``, ``AZURE_STORAGE_KEY``, ``AZURE_STORAGE_CONNECTION_STRING``)
  whose values are long enough to be keys.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

from .errors import FnError, ShardwrightError, StorageError

F = TypeVar("F", bound=Callable)

#: storage_options keys whose values are credentials: boto3's, Google's, Azure's, and fsspec's
#: (fsspec names are refused with a hint, but must never be printed on the way there).
SECRET_OPTION_KEYS = frozenset(
    {
        # AWS / boto3
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        # Azure
        "account_key",
        "connection_string",
        "credential",
        "sas_token",
        "client_secret",
        # Google
        "credentials",
        "service_account_info",
        "private_key",
        # fsspec / s3fs / gcsfs / adlfs style
        "key",
        "secret",
        "token",
        "password",
    }
)

#: Parts of an Azure connection string that are credentials (the string is also hidden whole).
CONNECTION_STRING_SECRET_PARTS = ("AccountKey", "SharedAccessSignature")

# API_KEY/APIKEY/PRIVATE_KEY (trust round 10): OPENAI_API_KEY's value was kept unredacted in a
# failure record and written into a k8s manifest; a bare "KEY" would also catch SORT_KEY
_SECRET_ENV_WORDS = (
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "CREDENTIAL",
    "ACCESS_KEY",
    "ACCOUNT_KEY",
    "CONNECTION_STRING",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
)
_SECRET_ENV_NAMES = frozenset({"AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN"})
MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words
MIN_ENV_SECRET_LENGTH = 8  # a flag like FOO_TOKEN=true must not redact the word "true" everywhere
REDACTED = "***"


def is_secret_key(key: object) -> bool:
    """Whether a storage_options key names a credential."""
    return isinstance(key, str) and key.lower() in SECRET_OPTION_KEYS


def is_secret_env_name(name: str) -> bool:
    """Whether an environment variable is named like a credential."""
    upper = name.upper()
    return upper in _SECRET_ENV_NAMES or any(word in upper for word in _SECRET_ENV_WORDS)


# Variables whose value says where a credential is, not what it is (trust round 10: `k8s
# manifest --env GOOGLE_APPLICATION_CREDENTIALS=/var/secret/key.json`, the usual way to point at
# a mounted Secret, was refused for the CREDENTIAL in its name). Only an absolute path of
# ordinary characters passes: a JSON key pasted inline ({"type": ...}) or a token is still a
# secret. The suffixes: AWS_SHARED_CREDENTIALS_FILE, AWS_WEB_IDENTITY_TOKEN_FILE,
# AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_CERTIFICATE_PATH, Docker's DB_PASSWORD_FILE.
_CREDENTIAL_POINTER_NAMES = frozenset({"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE"})
_CREDENTIAL_POINTER_SUFFIXES = ("_FILE", "_PATH")
_PATH_VALUE = re.compile(r"(/[A-Za-z0-9._@-]+)+/?")


def is_credential_pointer_name(name: str) -> bool:
    """Whether an environment variable is one whose value is the path of a credential file."""
    upper = name.upper()
    return upper in _CREDENTIAL_POINTER_NAMES or upper.endswith(_CREDENTIAL_POINTER_SUFFIXES)


def is_credential_path(name: str, value: str) -> bool:
    """Whether ``name=value`` points at a credential file (a mounted Secret) rather than
    holding the credential: a pointer name (above) and an absolute path as its value."""
    return is_credential_pointer_name(name) and len(value) <= 4096 and _PATH_VALUE.fullmatch(value) is not None


def has_url_credentials(text: str) -> bool:
    """Whether ``text`` holds a URL with a ``user:password@`` part, or a presigned URL's
    signature or token, anywhere in it (what :func:`redact_url_credentials` hides)."""
    return redact_url_credentials(text) != text


def url_credentials(value: str) -> list[str]:
    """The user and password of a URL's ``user:password@`` part ([] when it has none)."""
    if "@" not in value or "://" not in value:
        return []
    try:
        parts = urlsplit(value)
        return [p for p in (parts.username, parts.password) if p]
    except ValueError:
        return []


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@'\"<>]+@")
_URL_SIGNATURE = re.compile(
    r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential|sig|signature|token|access_token)=)[^&\s'\"<>]+"
)


def redact_url_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` part of every URL in it, and the signatures and
    tokens of presigned URLs' queries, replaced by ``***`` (an input holding a URL with
    credentials is shown in failure records and messages)."""
    if "://" not in text:
        return text
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _URL_SIGNATURE.sub(lambda m: m.group(1) + REDACTED, text)


def without_url_credentials(value: str, *, query: bool = True) -> str:
    """``value`` with a URL's ``user:password@`` part removed (unchanged when it has none);
    ``query=False`` drops the query and fragment too (an Azure SAS token rides in the query).
    The one home of a URL shown in messages and identities without its credentials."""
    if query and not url_credentials(value):
        return value
    parts = urlsplit(value)
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    kept = (parts.query, parts.fragment) if query else ("", "")
    return urlunsplit((parts.scheme, host, parts.path, *kept))


def connection_string_secrets(value: str) -> list[str]:
    """The credential values inside an Azure connection string (``AccountKey=...;``)."""
    found = []
    for part in value.split(";"):
        name, sep, secret = part.partition("=")
        if sep and name.strip() in CONNECTION_STRING_SECRET_PARTS and secret:
            found.append(secret)
    return found


def _values_of(value: object, key: str | None, found: list[str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _values_of(v, k if isinstance(k, str) else None, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _values_of(v, key, found)
    elif isinstance(value, str):
        if key is not None and is_secret_key(key):
            found.append(value)
        found.extend(url_credentials(value))
        found.extend(connection_string_secrets(value))


def secret_values(storage_options: Mapping | None, env: Mapping[str, str] | None = None) -> list[str]:
    """Every secret a message could leak: credential values of ``storage_options`` (at any
    depth), URL credentials, connection-string keys, and environment variables named like a
    secret. Longest first, so that a secret containing another is replaced whole."""
    found: list[str] = []
    if storage_options:
        _values_of(storage_options, None, found)
    environ = os.environ if env is None else env
    for name, value in environ.items():
        if is_secret_env_name(name) and len(value) >= MIN_ENV_SECRET_LENGTH:
            found.append(value)
            found.extend(connection_string_secrets(value))
    return sorted({s for s in found if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret (and its URL-quoted form) replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
        quoted = quote(secret, safe="")
        if quoted != secret:
            text = text.replace(quoted, REDACTED)
    return text


def public_options(storage_options: Mapping | None) -> dict:
    """``storage_options`` without credentials, for a place that is kept or shown (a Slurm
    command line, a job record): secret keys are dropped, URL credentials removed, and nested
    mappings cleaned the same way."""
    public: dict = {}
    for key, value in (storage_options or {}).items():
        if is_secret_key(key):
            continue
        if isinstance(value, Mapping):
            value = public_options(value)
        elif isinstance(value, str):
            if connection_string_secrets(value):
                continue
            value = without_url_credentials(value)
        public[key] = value
    return public


def exception_chain(exc: BaseException, limit: int = 50) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, nearest first (cycle-safe)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen) and len(seen) < limit:
        seen.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return seen


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


def redact_exception(exc: BaseException, secrets: list[str]) -> BaseException:
    """``exc`` itself when no secret appears in it or in its chained exceptions; otherwise an
    exception of the same class (StorageError for foreign ones) whose message is redacted and
    whose chain is cut (a botocore exception prints its own fields, which cannot be edited)."""
    if not secrets:
        return exc
    texts = [_describe(e) for e in exception_chain(exc)]
    if all(redact(text, secrets) == text for text in texts):
        return exc
    try:
        first = str(exc)
    except Exception:
        first = ""
    message = redact(first, secrets)
    if len(texts) > 1:
        message += " (caused by " + "; caused by ".join(redact(t, secrets) for t in texts[1:]) + ")"
    replacement: BaseException
    if isinstance(exc, FnError):
        replacement = FnError(
            message,
            input_index=exc.input_index,
            input_repr=redact(exc.input_repr, secrets),
            worker_traceback=redact(exc.worker_traceback, secrets),
        )
    else:
        try:
            replacement = type(exc)(message) if isinstance(exc, ShardwrightError) else StorageError(message)
        except Exception:
            replacement = StorageError(message) if isinstance(exc, OSError) else ShardwrightError(message)
    replacement.__cause__ = None
    replacement.__suppress_context__ = True
    return replacement


def without_secrets(exc: BaseException, storage_options: Mapping | None) -> BaseException:
    """``exc`` without a secret of ``storage_options`` or the environment (itself when it holds none)."""
    return redact_exception(exc, secret_values(storage_options))


def redacting(func: F) -> F:
    """Whatever ``func`` raises reaches the caller without a secret of its ``storage_options``
    keyword (or of the environment) in its message or its chained exceptions: the one wrapper
    of the public entry points (optimize, abandon, verify)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            options = kwargs.get("storage_options")
            clean = without_secrets(exc, options if isinstance(options, Mapping) else None)
            if clean is exc:
                raise
            raise clean from None

    return wrapper  # type: ignore[return-value]
