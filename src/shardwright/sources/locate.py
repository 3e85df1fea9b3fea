"""Where a source's files are: paths, directories, prefixes and globs resolved to listed
objects (key, size, version) on a read-only input view of their storage.

Every mistake is one :class:`~shardwright.errors.InputsError` line naming the path and the
fix, raised while the source is built (before any worker starts): a path that does not
exist, a glob or directory with no matching file, an unknown URL scheme.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputsError, OutputDirError
from ..storage import Storage, open_storage
from ..storage.base import ObjectInfo

__all__ = ["HOST", "Located", "RangedFile", "glob_regex", "locate", "open_input_root", "open_listed"]

_GLOB_CHARS = re.compile(r"[*?\[]")
HOST = os.uname().nodename  # device numbers mean the same only on the host that listed


@dataclass(frozen=True)
class Located:
    """One input file: the storage it is read through (an input view), its listing, and a
    local file's identity when listed (device, inode, host; ``link``: listed as a link),
    checked by :func:`open_listed` on every read."""

    root: Storage
    info: ObjectInfo
    dev: int = 0
    ino: int = 0
    host: str = ""
    link: bool = False

    @property
    def name(self) -> str:
        """The file's URL or absolute path, as users wrote it and messages show it."""
        return join_url(self.root.url, self.info.key)

    def open_local(self, what: str) -> int | None:
        """A checked descriptor of this file when it is local (see :func:`open_listed`), else None."""
        path = self.root.local_path(self.info.key)
        if path is None:
            return None
        return open_listed(path, self.name, self.info.size, self.dev, self.ino, self.host, self.link, what)


def open_listed(path: str, name: str, size: int, dev: int, ino: int, host: str, link: bool, what: str) -> int:
    """A read-only descriptor of the listed local file ``path``, or InputsError: opened without
    following a link (``O_NOFOLLOW``, unless it was listed as a link) and checked to be the
    listed file (device and inode on the listing's host, when known; size everywhere), so a
    file swapped for a link, or for another file, after the listing is refused, never read.
    The one home of this check (sources.files, sources.jsonl, sources.parquet)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if link else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path) and not link:
            raise InputsError(
                f"{what}: {name} was replaced by a symbolic link after it was listed; "
                "refusing to read through it (replace the link with the file and rerun)"
            ) from None
        raise exc
    st = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(st.st_mode):
        problem = "is no longer a regular file"
    elif ino and host == HOST and (st.st_dev, st.st_ino) != (dev, ino):
        problem = "is no longer the file that was listed (another device/inode: replaced after the listing)"
    elif st.st_size != size:
        problem = f"changed size since it was listed ({size:,} -> {st.st_size:,} bytes)"
    if problem is not None:
        os.close(fd)
        raise InputsError(f"{what}: {name} {problem}; refusing to read it (list the files again)")
    return fd


def _with_identity(view: Storage, info: ObjectInfo, what: str, within: str | None = None) -> Located:
    """A Located with the local file's identity (device, inode, whether it is a link), or
    InputsError in one line naming the file: one that is not a regular file (a FIFO's read
    blocks for ever; a device reads without end), or, found in directory or glob ``within``
    (a key prefix of ``view``), one that is reached through a link out of it (sources.files'
    rule: a file named by its own path may be a link, a directory's files stay inside it)."""
    path = view.local_path(info.key)
    if path is None:
        return Located(view, info)
    try:
        is_link = os.path.islink(path)
        st = os.stat(path)
    except OSError:
        return Located(view, info)  # the read names what is wrong
    if not stat.S_ISREG(st.st_mode):
        raise InputsError(
            f"{what}: {path} is not a regular file (a FIFO, a socket or a device: a read would block or never end); "
            "pass regular files only"
        )
    if within is not None:
        base = path[: len(path) - len(info.key)]  # the view's root: local paths end with their key
        top = os.path.realpath(os.path.join(base, *within.split("/")) if within else base)
        target = os.path.realpath(path)
        if not target.startswith(top.rstrip(os.sep) + os.sep):
            raise InputsError(
                f"{what}: {path} is reached through a symbolic link to {target}, out of {top}; {what} reads a "
                "directory's files only from inside it: copy the file in, or pass it by its own path"
            )
    return Located(view, info, st.st_dev, st.st_ino, HOST, is_link)


def join_url(root_url: str, key: str) -> str:
    if "://" in root_url:
        return f"{root_url.rstrip('/')}/{key}"
    return os.path.join(root_url, *key.split("/"))


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A regex for a '/'-separated glob: ``*`` and ``?`` stay within one name, ``**/`` matches
    any number of directories (also none), ``[...]`` a character class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end].replace("\\", "\\\\")
                out.append(f"[^{body[1:]}]" if body.startswith("!") else f"[{body}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def open_input_root(url: str, storage_options: dict | None, what: str) -> Storage:
    """A read-only input view of the storage at ``url`` (a directory or prefix)."""
    try:
        storage = open_storage(url, storage_options)
    except OutputDirError as exc:  # its messages speak of output_dir; say what this is
        raise InputsError(f"{what} {url!r} cannot be opened: {str(exc).replace('output_dir', 'input path')}") from None
    return storage.input_view()


def _split(spec: str) -> tuple[str, str]:
    """(root URL or directory, the rest: a key, a glob, or '')."""
    if "://" in spec:
        scheme, rest = spec.split("://", 1)
        bucket, _, path = rest.partition("/")
        parts = path.split("/") if path else []
        base = f"{scheme}://{bucket}"
    else:
        absolute = os.path.abspath(os.path.expanduser(spec))
        parts = absolute.strip("/").split("/")
        base = "/"
    fixed = []
    for part in parts:
        if _GLOB_CHARS.search(part):
            break
        fixed.append(part)
    rest = "/".join(parts[len(fixed) :])
    if not rest and fixed:  # a file or a directory: list its parent with its name as prefix
        fixed, rest = fixed[:-1], fixed[-1]
    root = posixpath.join(base, *fixed) if fixed else base
    return root, rest


def _as_list(spec: object, what: str) -> list[str]:
    if isinstance(spec, (str, os.PathLike)):
        return [os.fspath(spec)]
    if isinstance(spec, Iterable) and not isinstance(spec, (bytes, dict)):
        items = list(spec)
        if not items:
            raise InputsError(f"{what}: the list of paths is empty; pass at least one file, directory or URL")
        if not all(isinstance(s, (str, os.PathLike)) for s in items):
            bad = next(s for s in items if not isinstance(s, (str, os.PathLike)))
            raise InputsError(f"{what}: every path must be a str or os.PathLike, got {type(bad).__name__}")
        return [os.fspath(s) for s in items]
    raise InputsError(f"{what}: pass a path, a URL, a glob or a list of them; got {type(spec).__name__}")


def locate(spec: object, storage_options: dict | None, default_pattern: str, what: str) -> list[Located]:
    """The files ``spec`` names, in order: each path or URL of the list in turn; a directory
    or prefix means its files matching ``default_pattern``; a glob its matches; sorted by key
    within one directory or glob. ``what`` names the source in messages."""
    found: list[Located] = []
    views: dict[str, Storage] = {}
    for raw in _as_list(spec, what):
        if not raw.strip():
            raise InputsError(f"{what}: an empty path; pass a file, directory or URL")
        if raw.lower().startswith("hf://"):  # said "unsupported URL scheme 'hf'", with no way on
            raise InputsError(
                f"{what} reads local files and object stores, not the Hugging Face Hub ({raw}): use "
                "shardwright.optimize_hf('hf://datasets/org/name', ...) or "
                "StreamingDataset('hf://datasets/org/name', item_loader=ParquetLoader())"
            )
        root_url, rest = _split(raw)
        is_glob = bool(_GLOB_CHARS.search(rest))
        view = views.get(root_url)
        if view is None:
            view = views[root_url] = open_input_root(root_url, storage_options, what)
        if is_glob:
            regex = glob_regex(rest)
            head = rest.split("*")[0].split("?")[0].split("[")[0]
            prefix = head.rsplit("/", 1)[0] + "/" if "/" in head else ""
            matches = [i for i in view.list_info(prefix) if regex.match(i.key)]
            if not matches:
                raise InputsError(f"{what}: {raw} matches no file; check the pattern and the path")
            found.extend(_with_identity(view, i, what, prefix.rstrip("/")) for i in matches)
            continue
        listed = view.list_info(rest)
        exact = [i for i in listed if i.key == rest] if rest else []
        if exact:
            found.append(_with_identity(view, exact[0], what))
            continue
        directory = f"{rest}/" if rest else ""
        regex = glob_regex(default_pattern)
        inside = [i for i in listed if i.key.startswith(directory) and regex.match(i.key[len(directory) :])]
        if inside:
            found.extend(_with_identity(view, i, what, rest) for i in inside)
            continue
        if any(i.key.startswith(directory) for i in listed):
            raise InputsError(
                f"{what}: {raw} holds no file matching {default_pattern!r}; pass the files themselves or a glob"
            )
        raise InputsError(f"{what}: {raw} does not exist; check the path or URL (and storage_options)")
    return found


class RangedFile(io.RawIOBase):
    """A read-only, seekable file object over one object of a storage, read with
    :meth:`Storage.read_range` (so pyarrow's reads get the storage's retries and options)."""

    def __init__(self, storage: Storage, key: str, size: int):
        super().__init__()
        self.storage, self.key, self.length, self.pos = storage, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def size(self) -> int:
        return self.length

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), max(0, self.length - self.pos))
        if want == 0:
            return 0
        data = self.storage.read_range(self.key, self.pos, want)
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, self.length - self.pos)
        size = min(size, max(0, self.length - self.pos))
        if size == 0:
            return b""
        data = self.storage.read_range(self.key, self.pos, size)
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)
