"""Where the jobs service keeps its state: never under a directory named .shardwright, and a
store at the first servers' default (~/.shardwright/jobs.db) moved without losing anything;
and the ``jobs submit`` flags generated from the engine's JOB_OPTIONS."""

from __future__ import annotations

import os
import sqlite3

import pytest

from shardwright.errors import UsageError
from shardwright.service.store import SqliteJobStore
from shardwright.service.storeplace import check_db_path, choose_db, default_db


class FakeLock:
    taken: list[str] = []

    def __init__(self, path: str):
        self.path = path
        FakeLock.taken.append(path)

    def release(self) -> None:
        pass


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return tmp_path


def _old_store(home, executor: str = "local", state: str = "SUCCEEDED") -> None:
    old = home / ".shardwright"
    (old / "jobs-files" / "jobs" / "j1").mkdir(parents=True)
    (old / "jobs-files" / "jobs" / "j1" / "log.txt").write_text("log")
    (old / "api-token").write_text("t" * 40)
    SqliteJobStore(str(old / "jobs.db")).close()
    with sqlite3.connect(old / "jobs.db") as db:
        db.execute(
            f"INSERT INTO jobs VALUES ('j1', '{state}', 'p', '[]', '/o', '{{}}', '{{}}', "
            f'\'{{"kind": "{executor}"}}\', \'[]\', 1.0, 1, \'{{"inputs_done": 0, "inputs_total": 0, "items": 0}}\', '
            "NULL, NULL, NULL, 0, 0, 0)"
        )


def test_the_default_store_is_not_under_a_directory_named_like_the_engines_state(home):
    assert default_db() == str(home / ".local" / "state" / "shardwright-service" / "jobs.db")
    with pytest.raises(UsageError, match=r"must not be in a directory named \.shardwright"):
        check_db_path(str(home / "data" / ".shardwright" / "jobs.db"))
    with pytest.raises(UsageError):
        choose_db(str(home / ".shardwright" / "jobs.db"), FakeLock)  # the old default, given explicitly


def test_an_old_default_store_is_moved_whole_and_an_interrupted_move_is_finished(home, monkeypatch):
    _old_store(home)
    (home / ".shardwright" / "checkpoint.json").write_text("{}")  # an engine's file: not the service's
    path, notice, _ = choose_db(None, FakeLock)
    new = home / ".local" / "state" / "shardwright-service"
    assert path == str(new / "jobs.db") and notice.startswith("moved the job store")
    assert (new / "api-token").read_text() == "t" * 40 and (new / "jobs-files" / "jobs" / "j1" / "log.txt").exists()
    assert SqliteJobStore(path).get("j1").pipeline == "p"
    assert sorted(os.listdir(home / ".shardwright")) == ["checkpoint.json"]

    # a move cut short after the token went: the old database is still the store; the next start finishes
    _old_store(home / "second")
    monkeypatch.setenv("HOME", str(home / "second"))
    new2 = home / "second" / ".local" / "state" / "shardwright-service"
    new2.mkdir(parents=True)
    os.rename(home / "second" / ".shardwright" / "api-token", new2 / "api-token")
    path, notice, _ = choose_db(None, FakeLock)
    assert path == str(new2 / "jobs.db") and (new2 / "jobs-files" / "jobs" / "j1").is_dir()
    assert SqliteJobStore(path).get("j1") is not None


def test_an_old_store_beside_a_new_one_is_named_not_merged(home):
    _old_store(home)
    new = home / ".local" / "state" / "shardwright-service"
    new.mkdir(parents=True)
    SqliteJobStore(str(new / "jobs.db")).close()
    path, notice, _ = choose_db(None, FakeLock)
    assert path == str(new / "jobs.db") and f"--db {home}/.shardwright/jobs.db" in notice
    assert (home / ".shardwright" / "jobs.db").exists()


def test_an_old_store_whose_slurm_jobs_still_run_is_used_where_it_is_with_a_notice(home):
    _old_store(home, executor="slurm", state="RUNNING")
    path, notice, _ = choose_db(None, FakeLock)
    assert path == str(home / ".shardwright" / "jobs.db")
    assert "could not be moved now" in notice and "Slurm jobs" in notice
    assert (home / ".shardwright" / "jobs-files" / "jobs" / "j1" / "log.txt").exists()


def test_jobs_submit_has_a_flag_for_every_row_of_job_options():
    from shardwright.cli.main import build_parser
    from shardwright.engine.options import JOB_OPTIONS
    from shardwright.service.client import _options

    args = build_parser().parse_args(
        [
            "jobs",
            "submit",
            "echo",
            "--range",
            "3",
            "--output-dir",
            "/x",
            "--chunk-size",
            "5",
            "--mode",
            "overwrite",
            "--chunk-bytes",
            "64MB",
            "--timeout",
            "2.5",
            "--options",
            '{"num_workers": 2}',
        ]
    )
    assert _options(args) == {
        "num_workers": 2,
        "chunk_size": 5,
        "mode": "overwrite",
        "chunk_bytes": "64MB",
        "timeout": 2.5,
    }
    for spec in JOB_OPTIONS:
        assert hasattr(args, f"opt_{spec.name}"), spec.name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["jobs", "submit", "echo", "--range", "3", "--output-dir", "/x", "--mode", "wipe"])
