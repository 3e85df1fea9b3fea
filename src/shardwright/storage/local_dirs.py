"""Making and checking a local output directory, with every OS error mapped to one line that
names the fix (a file in the way, no permission, a full disk). Used by the local backend."""

from __future__ import annotations

import os

from ..errors import OutputDirError, OutputIsAFileError
from .files import NOT_WRITABLE_ERRNOS, disk_full_error, is_disk_full, tmp_name, unlink_quiet

__all__ = ["RESUME_FIX", "check_local_dir", "make_dirs"]

#: The fix for a full disk under output_dir: every commit is durable, so rerunning resumes.
RESUME_FIX = "free space and rerun the same call to resume; nothing committed was lost"


def make_dirs(path: str, what: str) -> None:
    """``os.makedirs(path)``, its errors mapped in this one place: OutputDirError naming the
    fix (a file in the way, no permission), StorageError for a full disk. ``what`` names the
    directory in messages ("output_dir", "directory")."""
    try:
        os.makedirs(path, exist_ok=True)
    except (NotADirectoryError, FileExistsError) as e:
        raise OutputDirError(
            f"cannot create {what} {path}: a parent path is a file, not a directory; "
            f"remove or rename that file, or choose another output_dir"
        ) from e
    except OSError as e:
        if e.errno in NOT_WRITABLE_ERRNOS:
            raise OutputDirError(
                f"cannot create {what} {path}: {e.strerror}; create it yourself or choose "
                f"a location this user can write to"
            ) from e
        if is_disk_full(e):
            raise disk_full_error(e, f"creating {path}", RESUME_FIX) from e
        raise


def check_local_dir(path: str, *, create: bool) -> None:
    """Make sure ``path`` is (or, with ``create``, becomes) a directory we can write into."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputIsAFileError(
            f"output_dir {path} is a file, not a directory: remove it or choose another output_dir"
        )
    if not os.path.isdir(path):
        if not create:
            return
        make_dirs(path, "output_dir")
    # os.access lies for root and on some network filesystems: really create a file.
    probe = tmp_name(os.path.join(path, "shardwright-probe"))  # a scratch name: never listed
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full_error(e, f"creating a file in output_dir {path}", RESUME_FIX) from e
        raise OutputDirError(
            f"output_dir {path} is not writable ({e.strerror}): fix its permissions "
            f"(e.g. chmod u+w, or a read-only mount) or choose another output_dir"
        ) from e
    finally:
        unlink_quiet(probe)
