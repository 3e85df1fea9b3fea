"""``sources.files``: a listing of files as :class:`FileRef` inputs (fn reads what it needs).

The driver keeps the listing compactly, one str of keys and one of versions (NUL-separated)
and three arrays of 8-byte numbers: about 30 bytes plus the key and version per file, so a
million files cost well under 100 MB. A :class:`FileRef` is made when an input is indexed:
small, picklable (its storage handle is shared by every ref of one listing when pickled
together), and it reads through our storage, so ``storage_options`` and retries apply.

Local listings hold regular files only (a FIFO, socket or device is skipped, named in a
warning: a read of a FIFO blocks forever) and refuse a link to a file out of the directory
(an :class:`~shardwright.errors.InputsError` naming it). Each listed local file's device and
inode are kept, and every read opens it without following a link (``O_NOFOLLOW``, unless
it was listed as a link inside the directory) and checks it is the listed file (device and
inode on the listing's host, size everywhere): a file swapped for a link, or for another
file, after the listing is refused, never read.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import stat
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ..errors import InputsError
from ..storage import Storage
from ..storage.local import LocalStorage
from .base import Source
from .locate import HOST as _HOST
from .locate import RangedFile, glob_regex, join_url, open_input_root, open_listed

__all__ = ["FileRef", "FilesSource", "files"]

log = logging.getLogger("shardwright")


@dataclass(frozen=True)
class FileRef:
    """One listed file: ``path`` (its URL or absolute path), ``size``, ``version`` (etag,
    generation, or size-mtime_ns), and :meth:`read` / :meth:`open` to get its bytes."""

    path: str
    key: str
    size: int
    version: str
    storage: Storage
    # a local file's identity when listed (0: not local, or listed before this was kept)
    dev: int = 0
    ino: int = 0
    host: str = ""
    link: bool = False  # listed as a link to a file inside the directory

    def read(self) -> bytes:
        """The whole file (through the storage: retries and storage_options apply)."""
        if self.storage.local_path(self.key) is not None:
            with self.open() as f:
                return f.read()
        return self.storage.read_bytes(self.key)

    def open(self) -> IO[bytes]:
        """A read-only, seekable binary file object (ranged reads, 1 MB buffered)."""
        local = self.storage.local_path(self.key)
        if local is not None:
            return os.fdopen(self._open_listed(local), "rb")
        return io.BufferedReader(RangedFile(self.storage, self.key, self.size), 1 << 20)

    def _open_listed(self, local: str) -> int:
        """A descriptor of the listed file, or InputsError: never a link put in its place."""
        return open_listed(local, self.path, self.size, self.dev, self.ino, self.host, self.link, "sources.files")

    def __repr__(self) -> str:
        return f"FileRef({self.path!r}, size={self.size})"


class FilesSource(Source):
    kind = "files"

    def __init__(
        self,
        root: Storage,
        keys: list[str],
        sizes: list[int],
        versions: list[str],
        hashes: list[str],
        local: tuple[list[int], list[int], bytes] | None = None,
    ):
        super().__init__()
        # local files: (devices, inodes, link flags), checked on every read (see FileRef)
        self._devs = array("q", local[0] if local else [])
        self._inos = array("q", local[1] if local else [])
        self._links = bytes(local[2]) if local else b""
        self._host = _HOST
        self._root = root
        self._keys = "\0".join(keys)
        self._key_ends = array("q", _ends(keys))
        self._sizes = array("q", sizes)
        self._versions = "\0".join(versions)
        self._version_ends = array("q", _ends(versions))
        self._hashes = "".join(hashes)  # hash_contents=True: 16 hex chars per file, else ""
        self._count = len(keys)

    def _key(self, unit: int) -> str:
        start = self._key_ends[unit - 1] + 1 if unit else 0
        return self._keys[start : self._key_ends[unit]]

    def _version(self, unit: int) -> str:
        start = self._version_ends[unit - 1] + 1 if unit else 0
        version = self._versions[start : self._version_ends[unit]]
        if self._hashes:
            version += ":" + self._hashes[16 * unit : 16 * unit + 16]
        return version

    def _unit_rows(self) -> Sequence[int]:
        return _Ones(self._count)

    def _offsets(self) -> list[int]:
        return _Range(self._count + 1)  # type: ignore[return-value]

    def _unit_identity(self, unit: int) -> tuple[str, str]:
        return join_url(self._root.url, self._key(unit)), f"{self._sizes[unit]}:{self._version(unit)}"

    def _read_block(self, unit: int, row: int) -> tuple[int, list]:
        key = self._key(unit)
        ref = FileRef(join_url(self._root.url, key), key, self._sizes[unit], self._version(unit), self._root)
        if self._inos:
            ref = FileRef(
                ref.path,
                key,
                ref.size,
                ref.version,
                self._root,
                self._devs[unit],
                self._inos[unit],
                self._host,
                bool(self._links[unit]),
            )
        return 0, [ref]

    def _view(self, start: int, stop: int) -> Source:
        """A view pickles only its own files' entries (a shard of a million-file listing
        sends its workers its own part of the table)."""
        start, stop = max(0, start), min(stop, self._count)
        keys = [self._key(u) for u in range(start, stop)]
        versions = [self._versions_raw(u) for u in range(start, stop)]
        hashes = [self._hashes[16 * u : 16 * u + 16] for u in range(start, stop)] if self._hashes else []
        local = None
        if self._inos:
            local = (list(self._devs[start:stop]), list(self._inos[start:stop]), self._links[start:stop])
        view = FilesSource(self._root, keys, list(self._sizes[start:stop]), versions, hashes, local)
        view._host = self._host
        return view

    def _versions_raw(self, unit: int) -> str:
        start = self._version_ends[unit - 1] + 1 if unit else 0
        return self._versions[start : self._version_ends[unit]]

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_offsets_cache", None)
        return state

    def unit_columns(self) -> tuple[list[str], list[str], list[int], list[int]]:
        """Columns straight from the compact listing (no object per file)."""
        cached = self.__dict__.get("_columns_cache")
        if cached is None:
            url = self._root.url
            prefix = f"{url.rstrip('/')}/" if "://" in url else url.rstrip(os.sep) + os.sep
            keys = self._keys.split("\0") if self._count else []
            if "://" not in url and os.sep != "/":
                keys = [k.replace("/", os.sep) for k in keys]
            raw = self._versions.split("\0") if self._count else []
            hashes = [self._hashes[16 * u : 16 * u + 16] for u in range(self._count)] if self._hashes else None
            versions = [
                f"{size}:{v}:{hashes[u]}" if hashes else f"{size}:{v}"
                for u, (size, v) in enumerate(zip(self._sizes, raw))
            ]
            cached = ([prefix + k for k in keys], versions, [0] * self._count, [1] * self._count)
            self.__dict__["_columns_cache"] = cached
        return cached

    def describe(self) -> str:
        return f"files source of {len(self):,} file(s) under {self._root.url}"


def _ends(strings: list[str]) -> list[int]:
    ends, position = [], 0
    for text in strings:
        position += len(text)
        ends.append(position)
        position += 1  # the separator
    return ends


class _Ones(Sequence):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        return 1

    def __iter__(self) -> Iterator[int]:
        return iter([1] * self.n) if self.n < 1_000_000 else (1 for _ in range(self.n))


class _Range(Sequence):
    """offsets[i] = i without a list (a million files, one row each)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return range(self.n)[i]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i


def files(
    url_or_dir: object, pattern: str = "**/*", storage_options: dict | None = None, hash_contents: bool = False
) -> FilesSource:
    """The files under a directory or prefix whose path (relative to it) matches ``pattern``
    (``*`` within a name, ``**/`` any depth), sorted by path, as :class:`FileRef` inputs.

    Their identity is their listing: size and version (etag, generation, or size+mtime of a
    local file, which any host that resumes compares). ``hash_contents=True`` also hashes
    every file's content while listing, for edits that keep size and mtime.
    """
    if not isinstance(url_or_dir, (str, os.PathLike)) or not os.fspath(url_or_dir).strip():
        raise InputsError(f"sources.files: pass a directory or URL prefix, got {url_or_dir!r}")
    if not isinstance(pattern, str) or not pattern:
        raise InputsError(f"sources.files: pattern must be a non-empty glob such as '**/*.jpg', got {pattern!r}")
    if type(hash_contents) is not bool:
        raise InputsError(f"sources.files: hash_contents must be True or False, got {hash_contents!r}")
    url = os.fspath(url_or_dir)
    if "://" not in url:
        url = os.path.abspath(os.path.expanduser(url))
        if os.path.isfile(url):
            raise InputsError(f"sources.files: {url} is a file; pass the directory that holds the files")
    root = open_input_root(url.rstrip("/") if url.rstrip("/") else url, storage_options, "sources.files")
    regex = glob_regex(pattern)
    listed = root.list_info("")
    matching = [i for i in listed if regex.match(i.key)]
    local = None
    if isinstance(root, LocalStorage):
        matching, local = _regular_files(root, url, matching)
    if not matching:
        if not listed:
            raise InputsError(
                f"sources.files: {url} does not exist or is empty; check the path or URL (and storage_options)"
            )
        raise InputsError(f"sources.files: no file under {url} matches {pattern!r}; check the pattern")
    hashes: list[str] = []
    if hash_contents:
        for info in matching:
            digest = hashlib.blake2b(digest_size=8)
            at = len(hashes)
            ref = FileRef(info.key, info.key, info.size, "", root)
            if local is not None:
                ref = FileRef(
                    info.key, info.key, info.size, "", root, local[0][at], local[1][at], _HOST, bool(local[2][at])
                )
            with ref.open() as f:
                while block := f.read(1 << 20):
                    digest.update(block)
            hashes.append(digest.hexdigest())
    return FilesSource(
        root, [i.key for i in matching], [i.size for i in matching], [i.version for i in matching], hashes, local
    )


def _regular_files(root: LocalStorage, url: str, listed: list) -> tuple[list, tuple[list[int], list[int], bytes]]:
    """The regular files of a local listing with their (devices, inodes, link flags): other
    kinds are skipped (named in a warning), a link out of the directory is refused."""
    top = os.path.realpath(root.root)
    kept, devs, inos, links, skipped = [], [], [], bytearray(), []
    for info in listed:
        path = root.local_path(info.key) or ""
        try:
            st = os.lstat(path)
            is_link = stat.S_ISLNK(st.st_mode)
            if is_link:
                target = os.path.realpath(path)
                if not (target == top or target.startswith(top.rstrip(os.sep) + os.sep)):
                    raise InputsError(
                        f"sources.files: {path} is a symbolic link to {target}, out of {url}; "
                        "sources.files reads only under the directory it lists: copy the file in or list its own directory"
                    )
                st = os.stat(path)
        except FileNotFoundError:  # deleted since the listing
            continue
        if not stat.S_ISREG(st.st_mode):
            skipped.append(path)
            continue
        kept.append(info)
        devs.append(st.st_dev)
        inos.append(st.st_ino)
        links.append(1 if is_link else 0)
    if skipped:
        log.warning(
            "sources.files: skipped %d entr%s that %s not a regular file (a FIFO, socket or device): %s%s",
            len(skipped),
            "y" if len(skipped) == 1 else "ies",
            "is" if len(skipped) == 1 else "are",
            ", ".join(skipped[:5]),
            " ..." if len(skipped) > 5 else "",
        )
    return kept, (devs, inos, bytes(links))
