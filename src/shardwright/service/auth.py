"""Bearer-token auth: ``SHARDWRIGHT_API_TOKEN``, else a token generated on first start and kept
in a file only its owner can read (its path is printed, never the token)."""

from __future__ import annotations

import hmac
import os
import secrets

TOKEN_ENV = "SHARDWRIGHT_API_TOKEN"


def load_or_create_token(path: str) -> tuple[str, str]:
    """(token, where it came from)."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        if len(token) < 16:
            raise ValueError(
                f"{TOKEN_ENV} is too short ({len(token)} characters): use at least 16, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        return token, f"the {TOKEN_ENV} environment variable"
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            raise ValueError(f"token file {path} is readable by others (mode {mode:o}): chmod 600 {path}") from None
        with open(path) as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {path} is empty: delete it and restart to generate a new token") from None
        return token, path
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, path


def token_matches(header: str | None, token: str) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())
