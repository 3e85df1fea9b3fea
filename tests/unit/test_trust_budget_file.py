"""Trust round 5 (issue 33, 1d): the per-node rate budget lives in /dev/shm, which every local
user can write. Whatever another user planted at its path (a link, a FIFO, a directory, a file
of the wrong size, owner or mode, garbage) is one UsageError line naming the file, raised when
the budget is made; never a link followed, a raw error, a hang, or a budget shared across users."""

from __future__ import annotations

import os
import struct

import pytest

from shardwright.engine.limits import Limiter, SharedBudget, default_budget_path
from shardwright.errors import UsageError


def refused(path: str, *words: str) -> str:
    with pytest.raises(UsageError) as info:
        SharedBudget("10/s", path=path)
    text = str(info.value)
    assert "\n" not in text and path in text and "Limiter(path=" in text, text
    for word in words:
        assert word in text, text
    return text


def test_a_link_is_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"the victim's own file, longer than 64 bytes, which a budget must never overwrite\n")
    link = tmp_path / "budget"
    link.symlink_to(victim)
    refused(str(link), "symbolic link")
    assert victim.read_bytes().startswith(b"the victim's own file")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "not-yet")  # O_CREAT through a link would create the target
    refused(str(dangling), "symbolic link")
    assert not (tmp_path / "not-yet").exists()


def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused(str(fifo), "not a regular file")
    folder = tmp_path / "folder"
    folder.mkdir()
    refused(str(folder), "cannot be opened")


def test_a_file_of_the_wrong_size_or_mode_is_refused(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(os.urandom(1 << 20))
    refused(str(big), "1,048,576 bytes")
    open_to_all = tmp_path / "open"
    open_to_all.write_bytes(b"")
    os.chmod(open_to_all, 0o666)
    refused(str(open_to_all), "mode 666")
    linked = tmp_path / "linked"
    linked.write_bytes(b"")
    os.chmod(linked, 0o600)
    os.link(linked, tmp_path / "second-name")
    refused(str(linked), "2 hard links")


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another owner needs root")
def test_another_users_file_is_not_shared(tmp_path):
    planted = tmp_path / "planted"
    planted.write_bytes(b"\0" * 64)
    os.chmod(planted, 0o600)
    os.chown(planted, 65534, 65534)
    refused(str(planted), "another user (uid 65534)", "across users")


def test_the_default_path_is_per_user_and_valid_files_still_work(tmp_path):
    path = default_budget_path("teacher")
    assert os.path.basename(path) == f"shardwright-budget-{os.geteuid()}-teacher"
    own = tmp_path / "own"
    budget = SharedBudget("10/s", path=str(own))
    assert budget.reserve(now=100.0) == 0.0
    assert budget.reserve(now=100.0) == pytest.approx(0.1)
    budget.close()
    assert os.stat(own).st_mode & 0o777 == 0o600
    limiter = Limiter("10/s", path=str(own))  # the same file again: this user's own
    assert limiter.budget is not None and limiter.budget.reserve(now=100.0) == pytest.approx(0.2)


def test_garbage_contents_never_disable_the_budget(tmp_path):
    path = tmp_path / "garbage"
    budget = SharedBudget("10/s", path=str(path))
    budget.reserve(now=50.0)
    budget.close()
    magic, version, boot = struct.unpack_from("<4sI16s", path.read_bytes())
    for tat in (float("nan"), float("inf"), float("-inf"), 1e300):  # a right header, a hostile number
        path.write_bytes(struct.pack("<4sI16sd", magic, version, boot, tat).ljust(64, b"\0"))
        budget = SharedBudget("10/s", path=str(path))
        first = budget.reserve(now=1000.0)
        assert first == 0.0 or first <= 0.1, (tat, first)
        assert budget.reserve(now=1000.0) == pytest.approx(first + 0.1), tat  # still spaced
        budget.close()
