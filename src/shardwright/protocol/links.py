"""Refuse symbolic links inside a local output before anything is written or deleted there.

Every path the protocol writes or deletes lies under the output directory; a link planted at
``OUT/.shardwright`` (or ``shards/``, ``failed/``, ``leases/``, a chunk file, index.json)
would make a normal run, a cleanup or an overwrite follow it and write or delete outside OUT.
The output directory itself may be a link (the user chose it); nothing inside it may be.
This check runs before the first write of optimize(), merge and abandon; it does not close
the race with an attacker who plants a link while a run is going (that needs openat-style
I/O in the storage layer), and does not apply to S3, which has no links.
"""

from __future__ import annotations

import os

from ..errors import OutputDirError
from ..storage import Storage
from .layout import CHUNK_PREFIX, INDEX_KEY, STATE_DIR


def _links_in(root: str) -> list[str]:
    found: list[str] = []
    try:
        top = list(os.scandir(root))
    except FileNotFoundError:
        return found
    for entry in top:
        name = entry.name
        ours = name == STATE_DIR or name == INDEX_KEY or name.startswith(CHUNK_PREFIX)
        if ours and entry.is_symlink():
            found.append(entry.path)
    state = os.path.join(root, STATE_DIR)
    if os.path.isdir(state) and not os.path.islink(state):
        # os.walk does not follow links by default, and reports a linked directory in dirnames
        for dirpath, dirnames, filenames in os.walk(state):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    found.append(path)
    return found


def check_no_links(storage: Storage) -> None:
    """Raise OutputDirError naming every symbolic link where the protocol would write or
    delete (local outputs only), before anything is written."""
    state_path = storage.local_path(STATE_DIR)
    if state_path is None:
        return  # an object store: no links
    found = _links_in(os.path.dirname(state_path))
    if found:
        listed = ", ".join(f"{path} -> {os.readlink(path)}" for path in found)
        raise OutputDirError(
            f"symbolic link(s) inside the output {storage.url}: {listed}; shardwright never follows a link out "
            "of its output directory. Remove the link(s) (the files they point to are not touched) and rerun"
        )
