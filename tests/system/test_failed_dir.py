"""failed_dir= / SHARDWRIGHT_FAILED_DIR: one JSON record per failed input (run, node, task,
attempt) copied where the operator collects them, after the output's own record; a retry that
succeeds writes a "resolved" record beside it; a failed_dir that cannot be written never fails
the run. Real worker processes, a local directory and the real S3 server."""

from __future__ import annotations

import json
import logging
import os

import pytest

from shardwright import optimize
from shardwright.engine.failed_dir import output_slug
from shardwright.storage import open_storage

FLAG = "SW_TEST_FAIL_FLAG"


def flaky(i: int) -> dict:
    """Fails on multiples of 7 while the flag file exists (the bug), works once it is gone."""
    if i % 7 == 0 and os.path.exists(os.environ[FLAG]):
        raise ValueError(f"bad input {i}")
    return {"i": i}


def records_in(url: str, options: dict | None, output_url: str) -> dict[str, dict]:
    storage = open_storage(url, options)
    prefix = output_slug(output_url) + "/"
    return {k[len(prefix) :]: json.loads(storage.read_bytes(k)) for k in storage.list(prefix)}


def run_and_retry(output_dir: str, collected: str, options: dict | None, tmp_path, monkeypatch, **kwargs) -> str:
    flag = tmp_path / "flag"
    flag.write_text("x")
    monkeypatch.setenv(FLAG, str(flag))
    first = optimize(
        flaky, list(range(30)), output_dir, chunk_size=4, num_workers=2, on_error="skip", max_retries=1,
        storage_options=options, verbose=False, **kwargs,
    )  # fmt: skip
    assert first.failed == 5
    url = first.output_dir
    copies = records_in(collected, options, url)
    assert sorted(copies) == [f"{i:012d}-g0-failed.json" for i in (0, 7, 14, 21, 28)]
    one = copies["000000000007-g0-failed.json"]
    assert one["status"] == "failed" and one["output_dir"] == url and one["run_id"]
    assert one["input_index"] == 7 and one["attempt"] == 2 and one["exception_type"] == "ValueError"
    assert isinstance(one["node"], int) and one["task"]
    # the output's own record is there too (the one the run relies on)
    assert len(open_storage(output_dir, options).list(".shardwright/failed/")) == 5
    flag.unlink()  # the bug is fixed: the same call retries the failed inputs
    second = optimize(
        flaky, list(range(30)), output_dir, chunk_size=4, num_workers=2, on_error="skip", max_retries=1,
        storage_options=options, verbose=False, **kwargs,
    )  # fmt: skip
    assert second.failed == 0 and second.items == 5
    copies = records_in(collected, options, url)
    resolved = sorted(k for k, v in copies.items() if v["status"] == "resolved")
    assert resolved == [f"{i:012d}-g1-resolved.json" for i in (0, 7, 14, 21, 28)]
    assert copies["000000000014-g1-resolved.json"]["output_dir"] == url
    return url


def test_failed_dir_local_collects_failures_and_resolutions(tmp_path, monkeypatch):
    failed = str(tmp_path / "failures")
    run_and_retry(str(tmp_path / "out"), failed, None, tmp_path, monkeypatch, failed_dir=failed)


def test_failed_dir_from_the_environment_on_s3(s3_url, s3_storage_options, tmp_path, monkeypatch):
    failed = s3_url + "-failures"
    monkeypatch.setenv("SHARDWRIGHT_FAILED_DIR", failed)
    run_and_retry(s3_url, failed, s3_storage_options, tmp_path, monkeypatch)


def test_an_unwritable_failed_dir_never_fails_the_run(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    flag = tmp_path / "flag"
    flag.write_text("x")
    monkeypatch.setenv(FLAG, str(flag))
    result = optimize(
        flaky, list(range(10)), tmp_path / "out", chunk_size=4, num_workers=1, on_error="skip",
        failed_dir=str(blocker / "failures"), verbose=False,
    )  # fmt: skip
    assert result.published and result.failed == 2


def test_failed_dir_must_be_a_path_or_url(tmp_path):
    from shardwright import ArgumentTypeError

    with pytest.raises(ArgumentTypeError, match="failed_dir"):
        optimize(flaky, [1], tmp_path / "out", failed_dir=42, verbose=False)


def test_a_failed_dir_on_a_missing_bucket_is_one_clear_line_before_the_run(
    s3_url, s3_storage_options, tmp_path, caplog
):
    """Not a bare StorageError per failed input: one warning that names the bucket and the
    fix, before the run, and the run goes on (the copies are best effort)."""
    flag = tmp_path / "flag"
    flag.write_text("x")
    os.environ[FLAG] = str(flag)
    try:
        with caplog.at_level(logging.WARNING, logger="shardwright"):
            result = optimize(
                flaky, list(range(10)), s3_url, chunk_size=4, num_workers=1, on_error="skip",
                failed_dir="s3://sw-no-such-bucket-5150/failures", storage_options=s3_storage_options, verbose=False,
            )  # fmt: skip
    finally:
        del os.environ[FLAG]
    assert result.published and result.failed == 2
    lines = [r.getMessage() for r in caplog.records if "failed_dir" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "bucket sw-no-such-bucket-5150 does not exist" in lines[0] and "create it or fix the URL" in lines[0], lines
