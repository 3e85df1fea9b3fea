"""Trust round 5: StreamingRawDataset over a folder someone else prepared. A link to a file out
of the folder is refused (one line, when the dataset is made); a FIFO, socket or dangling link
is skipped with a warning naming it (a read of a FIFO would block forever); a file swapped for
a FIFO after listing is one line, not a hang."""

from __future__ import annotations

import logging
import os

import pytest

import shardwright as sw
from shardwright.errors import UsageError

pytest.importorskip("torch")


@pytest.fixture
def folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 3)
    (data / "b.bin").write_bytes(b"b" * 5)
    (data / "c.bin").symlink_to(data / "a.bin")  # a link inside: read as the file it names
    return data


def test_a_link_out_of_the_folder_is_refused(folder, tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"the reader's own file")
    (folder / "z.bin").symlink_to(secret)
    with pytest.raises(UsageError) as info:
        sw.StreamingRawDataset(str(folder))
    assert "symbolic link out of" in str(info.value) and "z.bin" in str(info.value)


def test_fifos_and_dangling_links_are_skipped_with_a_warning(folder, caplog):
    os.mkfifo(folder / "pipe")
    (folder / "gone.bin").symlink_to(folder / "nothing")
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        ds = sw.StreamingRawDataset(str(folder))
    assert [bytes(ds[i]) for i in range(len(ds))] == [b"aaa", b"bbbbb", b"aaa"]
    assert "pipe" in caplog.text and "gone.bin" in caplog.text


def test_a_file_swapped_for_a_fifo_is_one_line_not_a_hang(folder):
    ds = sw.StreamingRawDataset(str(folder))
    os.unlink(folder / "b.bin")
    os.mkfifo(folder / "b.bin")
    with pytest.raises(UsageError, match="no longer a regular file"):
        ds[1]
