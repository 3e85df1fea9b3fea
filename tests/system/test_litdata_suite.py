"""litdata's own tests, switched to shardwright's names, as a litdata user switching would.

The vendored tests (litdata v0.2.45, Apache-2.0: litdata_suite/vendor/NOTICE) are copied into a
temporary folder with every public litdata name taken from shardwright and every internal left
as litdata's (litdata_suite/switch.py). The tests that reach only public names shardwright has
are run in one pytest subprocess; every outcome must be the one listed here: "passed", or the
reason of a documented difference (docs/litdata-compat.md, "litdata's own tests"). A test that
starts passing, or fails for an unlisted reason, fails this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("litdata")
pytest.importorskip("torch")

HERE = Path(__file__).parent / "litdata_suite"
sys.path.insert(0, str(HERE))
import switch  # noqa: E402

MAP_FOLDER = "map keeps its run state in OUTPUT/.shardwright/ (listed by os.listdir)"
WEIGHTS = "optimize(weights=) refused: workers take contiguous shards as they free up"
PLATFORM = "optimize_dns= refused: a Lightning AI platform setting"
IS_LAST = "fn(is_last=) refused: workers take shards as they free up, no worker's last input"
STAND_IN = "stand-in dataset implementing litdata's internal dataset protocol, not a StreamingDataset"
OVERWRITE = "an existing output is refused with shardwright's one-line message (litdata's HINT text)"
ANY = "environment: "  # outcome depends on the machine (network, optional packages)
# the failure message each documented difference shows (so a test failing otherwise is caught)
SIGN = {
    MAP_FOLDER: ".shardwright",
    WEIGHTS: "weights=...) is refused",
    PLATFORM: "optimize_dns=...) is refused",
    IS_LAST: "fn takes is_last",
    STAND_IN: "CombinedStreamingDataset mixes StreamingDataset objects",
    OVERWRITE: "Regex pattern did not match",
}
# outcome of each public-name test: "passed", or why it differs (each on docs/litdata-compat.md)
EXPECTED: dict[str, str] = {
    "processing/test_data_processor.py::test_data_processing_map_non_absolute_path": MAP_FOLDER,
    "processing/test_data_processor.py::test_data_processing_map_without_input_dir_and_folder": MAP_FOLDER,
    "processing/test_data_processor.py::test_map_batch_size": MAP_FOLDER,
    "processing/test_data_processor.py::test_data_processing_optimize_yield": MAP_FOLDER,
    "processing/test_data_processor.py::test_data_processing_map_weights_mismatch": WEIGHTS,
    "processing/test_data_processor.py::test_data_processing_map_without_input_dir_local": WEIGHTS,
    "processing/test_data_processor.py::test_empty_optimize[inputs0]": PLATFORM,
    "processing/test_data_processor.py::test_empty_optimize[inputs1]": PLATFORM,
    "processing/test_data_processor.py::test_empty_optimize[inputs2]": PLATFORM,
    "processing/test_data_processor.py::test_map_is_last[1-expected0]": IS_LAST,
    "processing/test_data_processor.py::test_map_is_last[2-expected1]": IS_LAST,
    "processing/test_data_processor.py::test_load_torch_audio[None]": "skipped",
    "processing/test_data_processor.py::test_load_torch_audio[zstd]": "skipped",
    "processing/test_data_processor.py::test_load_torch_audio_from_wav_file[None]": "skipped",
    "processing/test_functions.py::test_walk": "walk sorts the names in each tuple (os.walk: the directory's order)",
    "processing/test_functions.py::test_optimize_append_overwrite": OVERWRITE,
    "processing/test_functions.py::test_optimize_checkpoint_in_none_and_append_mode": OVERWRITE,
    "processing/test_functions.py::test_optimize_race_condition": ANY + "downloads from a public bucket (network)",
    "processing/test_functions.py::test_optimize_with_jpeg_array": "reads dataset.cache, a litdata internal",
    "streaming/test_dataset.py::test_dataset_with_mosaic_mds_data": ANY + "needs mosaicml-streaming",
    **{
        f"streaming/test_combined.py::{name}": STAND_IN
        for name in [
            "test_combined_dataset",
            "test_combined_dataset_iterate_over_all_4_datasets",
            "test_combined_dataset_num_samples_yield",
            "test_combined_dataset_num_samples_yield_iterate_over_all",
            "test_combined_dataset_state_dict",
            "test_combined_dataset_with_dataloader_and_one_worker[1]",
            "test_combined_dataset_with_dataloader_and_one_worker[2]",
            "test_drop_last_and_shuffle",
            *(
                f"test_combined_dataset_normalizes_weights[{p}]"
                for p in (
                    "weights0-expected0",
                    "weights1-expected1",
                    "weights2-expected2",
                    "weights3-expected3",
                    "weights4-expected4",
                    "None-expected5",
                )
            ),
        ]
    },
    **{
        f"streaming/test_dataloader.py::{name}": STAND_IN
        for name in [
            "test_streaming_dataloader",
            "test_dataloader_shuffle",
            "test_custom_collate",
            "test_custom_collate_multiworker",
        ]
    },
}


def _outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed / failed / skipped, failure message)."""
    out = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").replace(".", "/").removeprefix("tests/") + ".py::" + case.get("name", "")
        tags = {child.tag for child in case}
        message = " ".join(c.get("message") or "" for c in case if c.tag in ("failure", "error"))
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        out[name] = (outcome, message)
    return out


def test_litdata_suite_switched(tmp_path: Path) -> None:
    classes = switch.switch_tree(HERE / "vendor", tmp_path / "tests")
    public = sorted(test for test, kind in classes.items() if kind == "public")
    # every test is classified; the public ones are the ones run (internal ones counted)
    assert len(classes) == 100 and len(public) == 28, (len(classes), len(public))
    report = tmp_path / "report.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout",
            "90",
            f"--junitxml={report}",
            *(f"tests/{t}" for t in public),
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=600,
        check=False,
    )
    got = _outcomes(report)
    unexpected = {}
    for test, (outcome, message) in got.items():
        want = EXPECTED.get(test, "passed")
        if want.startswith(ANY):
            continue
        wanted = want if want in ("passed", "skipped") else "failed"
        if outcome != wanted or SIGN.get(want, "") not in message:
            unexpected[test] = (outcome, message[:200], want)
    assert not unexpected, unexpected
    assert set(got) >= set(EXPECTED)
    passed = sum(outcome == "passed" for outcome, _ in got.values())
    assert passed == sum(want == "passed" for want in (EXPECTED.get(t, "passed") for t in got))
