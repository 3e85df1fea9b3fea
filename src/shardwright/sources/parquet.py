"""``sources.parquet``: the rows of parquet files, as dicts of plain Python values.

The driver reads each file's footer once (row groups and their row counts, the schema);
a worker reads the row groups its shard covers, ``columns`` only, and turns them into dicts
a batch at a time. Files are read through our storage (a ranged-read file object), so
``storage_options`` and the storage's retries apply; local files are opened directly.
A row group that does not decode (a damaged page) makes each of its rows a
:class:`~shardwright.sources.base.BadRow` naming the file and the row group, so
``on_error="skip"`` and retries apply to them as to any failing input.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Sequence
from typing import Any

from ..errors import CorruptStateError, InputsError
from ..format.limits import DECODED_BYTES_ENV, max_decoded_bytes
from .base import BadRow, Source
from .locate import Located, RangedFile, locate

__all__ = ["ParquetSource", "parquet"]

BATCH_ROWS = 4096  # rows turned into Python dicts at a time (a row group may hold millions)


def _open(item: Located, verify: bool = False) -> Any:
    """``verify``: check each page against the CRC its writer stored (pages without one are read as they are)."""
    import pyarrow.parquet as pq

    fd = item.open_local("sources.parquet")
    if fd is not None:  # opened without following a link, checked to be the listed file
        return pq.ParquetFile(os.fdopen(fd, "rb"), page_checksum_verification=verify)
    return pq.ParquetFile(RangedFile(item.root, item.info.key, item.info.size), page_checksum_verification=verify)


# Bytes Arrow holds per value at the least, by parquet physical type (BYTE_ARRAY: its offset;
# FIXED_LEN_BYTE_ARRAY: its declared length, read from the column).
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8, "BYTE_ARRAY": 4}


# What a row costs at the least once it is a Python dict (the dict, plus a reference and a small
# object per column): an 87 KB file of 20 million int64 zeros became 4 GB of dicts.
_DICT_ROW, _DICT_COLUMN = 64, 32


def check_row_group(reader: Any, index: int, name: str, columns: list[str] | None, as_dicts: bool = False) -> None:
    """Refuse row group ``index`` before pyarrow decodes it whole when its rows times the least
    bytes Arrow holds per row (the footer's row count, the columns' types) pass the decoded-bytes
    limit (format.limits): a few KB of run-length-encoded pages can stand for gigabytes.
    ``as_dicts``: the whole group then becomes Python dicts, which count too."""
    meta = reader.metadata
    rows = meta.row_group(index).num_rows
    schema = meta.schema
    width = _DICT_ROW if as_dicts else 0
    for i in range(len(schema)):
        column = schema.column(i)
        if columns is None or column.path.split(".", 1)[0] in columns:
            kind = column.physical_type
            width += column.length if kind == "FIXED_LEN_BYTE_ARRAY" else _WIDTH.get(kind, 8)
            width += _DICT_COLUMN if as_dicts else 0
    limit = max_decoded_bytes()
    if rows < 0 or rows * max(width, 1) > limit:
        raise CorruptStateError(
            f"{name} row group {index} holds {rows:,} rows of at least {width} bytes each decoded, more than "
            f"{limit:,} bytes: it was refused before decoding. If the file is trusted, raise the limit "
            f"(shardwright.format.limits.set_limits(max_decoded_bytes=...) or {DECODED_BYTES_ENV}), or write "
            "it with smaller row groups"
        )


def rows_read_problem(table: Any, rows: int) -> str | None:
    """What is wrong with a row group that decoded to another number of rows than its footer
    says (None: nothing). The footer's counts place every row: a group holding fewer rows than
    it claims left the rows past them unreadable, a raw IndexError that stopped the run
    whatever ``on_error`` said (trust round 11)."""
    if table.num_rows != rows:
        return f"decoded to {table.num_rows:,} rows where the file's footer says {rows:,}"
    return None


def check_rows_read(table: Any, rows: int, name: str, index: int) -> None:
    """Refuse a row group whose rows are not the footer's count (:func:`rows_read_problem`)."""
    problem = rows_read_problem(table, rows)
    if problem is not None:
        raise CorruptStateError(f"{name} row group {index} {problem}: the file is damaged; replace it")


class ParquetSource(Source):
    kind = "parquet"

    def __init__(self, files: list[Located], row_groups: list[tuple[int, ...]], columns: list[str] | None):
        super().__init__()
        self._files = files
        self._row_groups = row_groups  # rows of each row group, per file
        self._columns = columns
        self._rows = [sum(groups) for groups in row_groups]
        self._reader: tuple[int, Any] | None = None  # (file, open ParquetFile) of this process

    def _unit_rows(self) -> Sequence[int]:
        return self._rows

    def _unit_identity(self, unit: int) -> tuple[str, str]:
        item = self._files[unit]
        return item.name, f"{item.info.size}:{item.info.version}"

    def _read_block(self, unit: int, row: int) -> tuple[int, list]:
        groups = self._row_groups[unit]
        index, first = self._group_of(unit, row)
        # a batch inside the row group, so a worker never holds a million-row group as dicts
        batch_first = first + (row - first) // BATCH_ROWS * BATCH_ROWS
        if self._reader is None or self._reader[0] != unit:
            self._reader = (unit, _open(self._files[unit]))
        cached = self.__dict__.get("_group")
        if cached is None or cached[:2] != (unit, index):
            where = f"{self._files[unit].name} row group {index} (rows {first:,}-{first + groups[index] - 1:,})"
            try:
                check_row_group(self._reader[1], index, self._files[unit].name, self._columns)
            except CorruptStateError as exc:  # too large to decode: its rows fail, named, and the run goes on
                said = str(exc).removeprefix(f"{self._files[unit].name} row group {index} ").split(": it was", 1)[0]
                fix = f"if the file is trusted, raise the limit ({DECODED_BYTES_ENV}), or write it with smaller row groups"
                return first, [BadRow(where, f"{said}: refused before decoding", fix=fix)] * groups[index]
            try:
                table = self._reader[1].read_row_group(index, columns=self._columns)
            except Exception as exc:  # pyarrow's OSError/ArrowInvalid for a damaged page
                bad = BadRow(where, f"cannot be read ({type(exc).__name__}: {str(exc)[:200]})", fix="replace the file")
                return first, [bad] * groups[index]
            problem = rows_read_problem(table, groups[index])
            if problem is not None:  # its rows fail, named, and the run goes on
                return first, [BadRow(where, f"{problem}: the file is damaged", fix="replace the file")] * groups[index]
            cached = self.__dict__["_group"] = (unit, index, table)
        table = cached[2]
        piece = table.slice(batch_first - first, BATCH_ROWS)
        return batch_first, piece.to_pylist()

    def _group_of(self, unit: int, row: int) -> tuple[int, int]:
        """The row group of file ``unit`` holding ``row``, and its first row: a bisection of
        the groups' first rows (a scan of them per block was quadratic: a 4 MB file of 20,000
        one-row groups took 20 s to read, and a million such groups hours; trust round 11)."""
        starts = self.__dict__.setdefault("_group_starts", {})
        firsts = starts.get(unit)
        if firsts is None:
            firsts = starts[unit] = [0, *itertools.accumulate(self._row_groups[unit])][:-1] or [0]
        index = max(0, min(bisect.bisect_right(firsts, row) - 1, len(firsts) - 1))
        return index, firsts[index]

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_reader"] = None
        state.pop("_group", None)
        state.pop("_group_starts", None)
        return state

    @property
    def files(self) -> list[Located]:
        """The files, in row order (the reader's parquet datasets read them row group by row group)."""
        return list(self._files)

    @property
    def row_group_rows(self) -> list[tuple[int, ...]]:
        """The rows of each row group, per file."""
        return list(self._row_groups)

    def arrow_types(self, unit: int) -> list[str]:
        """The arrow type of each column of file ``unit`` (litdata's index records them)."""
        return [str(field.type) for field in _open(self._files[unit]).schema_arrow]

    def read_row_group(self, unit: int, index: int, verify: bool = False) -> list[dict]:
        """Row group ``index`` of file ``unit`` as dicts (``columns`` only); pyarrow's error if
        it does not decode, or (``verify``) if a page does not match the CRC its writer stored.
        The file stays open in this process for the next group."""
        if self._reader is None or self._reader[0] != unit:
            self._reader = (unit, _open(self._files[unit], verify))
        check_row_group(self._reader[1], index, self._files[unit].name, self._columns, as_dicts=True)
        table = self._reader[1].read_row_group(index, columns=self._columns)
        check_rows_read(table, self._row_groups[unit][index], self._files[unit].name, index)
        return table.to_pylist()

    def _view(self, start: int, stop: int) -> Source:
        view = super()._view(start, stop)
        view.__dict__.pop("_group", None)
        return view

    def describe(self) -> str:
        return f"parquet source of {len(self):,} rows in {len(self._files):,} file(s)"


def parquet(
    path_or_url_or_list: object, columns: list[str] | None = None, storage_options: dict | None = None
) -> ParquetSource:
    """The rows of parquet files as a lazy sequence of dicts (``columns`` only, if given).

    A path, URL (``s3://bucket/raw/``), glob (``data/*.parquet``) or a list of them; a
    directory or prefix means its ``*.parquet`` files (recursively), sorted by path; rows in
    file order. ``len()`` comes from the footers; slicing reads only the row groups needed.
    A missing path, a glob matching nothing, a file that is not parquet (a corrupt footer)
    or a column that is not in a file is an InputsError naming the file and the fix.
    """
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns) or not columns
    ):
        raise InputsError(f"sources.parquet: columns must be a non-empty list of column names, got {columns!r}")
    files = locate(path_or_url_or_list, storage_options, "**/*.parquet", "sources.parquet")
    row_groups = []
    for item in files:
        try:
            meta = _open(item).metadata
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for a bad footer
            raise InputsError(
                f"sources.parquet: {item.name} is not a readable parquet file ({type(exc).__name__}: "
                f"{str(exc)[:200]}); replace or remove it"
            ) from None
        if columns is not None:
            names = set(meta.schema.to_arrow_schema().names)
            missing = [c for c in columns if c not in names]
            if missing:
                raise InputsError(
                    f"sources.parquet: {item.name} has no column {missing[0]!r} (it has "
                    f"{', '.join(sorted(names)[:20])}); fix columns= or the file"
                )
        row_groups.append(tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups)))
    return ParquetSource(files, row_groups, list(columns) if columns is not None else None)
