"""Issue 33 (messages that sent the user the wrong way), through the engine: credential URLs
in failure records, map() files written through '../', an all-failed run, abandon(5), and
refusals of inputs that have a shardwright.sources reader."""

from __future__ import annotations

import json
import logging
import os

import pytest

import shardwright as sw
from shardwright.errors import InputsError, UsageError


def fail(url):
    raise ValueError(f"cannot fetch {url}")


def test_credential_urls_in_inputs_are_redacted_in_failure_records(tmp_path):
    inputs = ["https://alice:hunter2secret@example.com/a.jpg", "https://b.example/x?X-Amz-Signature=deadbeefcafe&k=1"]
    result = sw.optimize(fail, inputs, tmp_path / "out", num_workers=1, on_error="skip", verbose=False)
    assert result.failed == 2
    text = "".join(p.read_text() for p in (tmp_path / "out" / ".shardwright" / "failed").iterdir())
    assert "hunter2secret" not in text and "alice" not in text and "deadbeefcafe" not in text
    assert "https://***@example.com/a.jpg" in text
    with pytest.raises(sw.FnError) as info:
        sw.optimize(fail, inputs[:1], tmp_path / "raise", num_workers=1, verbose=False)
    assert "hunter2secret" not in str(info.value)


def escape(i, out_dir):
    with open(os.path.join(out_dir, "..", f"stray-{i}.txt"), "w") as f:
        f.write("x")


def test_map_refuses_files_written_through_dotdot_naming_the_file(tmp_path):
    with pytest.raises(UsageError, match=r"map: fn wrote '\.\./stray-0\.txt' outside the directory"):
        sw.map(escape, [0], str(tmp_path / "out"), num_workers=1)


def test_an_all_failed_run_says_what_failed(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        sw.optimize(fail, ["a", "b"], tmp_path / "out", num_workers=1, on_error="skip", verbose=False)
    assert "2 of the 2 input(s) failed" in caplog.text and "forget" not in caplog.text


def test_abandon_of_a_number_is_one_type_error_line():
    with pytest.raises(TypeError, match=r"output_dir must be a str or a path .*got int"):
        sw.abandon(5)


def test_inputs_with_a_source_are_refused_naming_it(tmp_path):
    pd = pytest.importorskip("pandas")
    datasets = pytest.importorskip("datasets")
    cases = [
        (pd.DataFrame({"a": [1]}), r"pandas DataFrame.*sources\.parquet"),
        (datasets.Dataset.from_dict({"a": [1]}), r"sources\.hf\(dataset\)"),
        (datasets.Dataset.from_dict({"a": [1]}).to_iterable_dataset(), r"IterableDataset.*sources\.hf"),
        (str(tmp_path), r"inputs is a path .*sources\.files\(path\)"),
    ]
    for inputs, message in cases:
        with pytest.raises(InputsError, match=message):
            sw.optimize(json.dumps, inputs, tmp_path / "out", verbose=False)
