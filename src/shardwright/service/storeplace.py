"""Where the service keeps its state, and the move from the first servers' default.

The store (and the API token and job files next to it) never lives in a directory named
``.shardwright``: that is the name of the engine's state directory inside every output, and
an ``overwrite`` job writing to the directory above it would delete the store. The first
servers kept it in ``~/.shardwright/``: such a store is moved to the new default on start
(file by file with rename, the database last, so a move cut short is finished by the next
start), or used where it is with a notice when it cannot be moved safely.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ..errors import UsageError

STATE_NAME = ".shardwright"  # the engine's per-output state directory (protocol.layout)
OLD_DEFAULT_DB = os.path.join("~", ".shardwright", "jobs.db")


def default_db() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join("~", ".local", "state")
    return os.path.join(os.path.expanduser(base), "shardwright-service", "jobs.db")


def companions(db_path: str) -> list[str]:
    """What belongs to a store besides the database, in the order they are moved."""
    base = os.path.dirname(db_path)
    return [
        os.path.splitext(db_path)[0] + "-files",
        os.path.join(base, "api-token"),
        db_path + "-wal",
        db_path + "-shm",
    ]


def check_db_path(db_path: str) -> None:
    if STATE_NAME in db_path.split(os.sep):
        raise UsageError(
            f"--db {db_path}: the job store must not be in a directory named {STATE_NAME} (the engine's state "
            f"directory in every output: a job overwriting the directory above it would delete the store); "
            f"choose another --db, e.g. {default_db()}"
        )


def _has_live_slurm_jobs(db_path: str) -> bool:
    """Slurm tasks write status files by absolute path into the job files: they must not move."""
    with contextlib.closing(sqlite3.connect(db_path, timeout=30)) as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM jobs WHERE state IN ('RUNNING', 'PENDING') AND executor LIKE '%slurm%'"
        ).fetchone()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the database file holds every change before it moves
    return bool(count)


def move_old_store(old: str, new: str) -> str:
    """Move a store from ``old`` to ``new`` (the server already holds the old store's lock);
    returns the path to use and the notice to print."""
    os.makedirs(os.path.dirname(new), mode=0o700, exist_ok=True)
    if os.stat(os.path.dirname(old)).st_dev != os.stat(os.path.dirname(new)).st_dev:
        return old
    if _has_live_slurm_jobs(old):
        return old
    for path, target in zip(companions(old), companions(new)):
        if os.path.lexists(path):
            os.rename(path, target)
    os.rename(old, new)  # last: until then the old place stays the store (a later start finishes)
    return new


def choose_db(given: str | None, lock) -> tuple[str, str | None, object]:
    """(the database path, a notice or None, the lock held on it). ``lock(path)`` returns a held
    lock or raises UsageError (another server uses it)."""
    if given is not None:
        path = os.path.abspath(os.path.expanduser(given))
        check_db_path(path)
        return path, None, lock(path)
    new = default_db()
    old = os.path.abspath(os.path.expanduser(OLD_DEFAULT_DB))
    if not os.path.exists(old):
        return new, None, lock(new)
    if os.path.exists(new):  # both: never merge two stores silently, never hide one either
        notice = (
            f"a job store of an older server is still at {old}; its jobs are not in this one ({new}): "
            f"serve it with --db {old}, or remove it once you no longer need it"
        )
        return new, notice, lock(new)
    held = lock(old)
    path = move_old_store(old, new)
    if path == old:
        notice = (
            f"the job store is at the old default {old}; it could not be moved now (another filesystem, or "
            f"Slurm jobs still follow its files): move it to {new} when no job runs, or pass --db"
        )
        return old, notice, held
    held.release()
    with contextlib.suppress(OSError):
        os.unlink(old + ".lock")
    return (
        new,
        f"moved the job store, API token and job files from {os.path.dirname(old)} to {os.path.dirname(new)}",
        lock(new),
    )
