"""The outcome of each public-name litdata test run switched to shardwright: "passed", "skipped",
or the reason of a documented difference (each on docs/litdata-compat.md, "litdata's own
tests"). A test not listed must pass.

SIGN gives, for each reason, the texts one of which the failure message must contain, so a
test that fails for another reason than the listed one is caught.
"""

from __future__ import annotations

MAP_FOLDER = "map/optimize keep the run state in OUTPUT/.shardwright/ (listed by os.listdir)"
CHUNK_NAMES = "chunk files carry a run stamp and OUTPUT/.shardwright/ holds the run state"
WEIGHTS = "optimize(weights=) refused: workers take contiguous shards as they free up"
PLATFORM = "optimize_dns= refused: a Lightning AI platform setting"
IS_LAST = "fn(is_last=) refused: workers take shards as they free up, no worker's last input"
KEY_FN = "optimize(key_fn=) refused: no keys/ sidecar, dataset[key] is not offered"
PROFILE = "profile_batches= / profile_cprofile= refused: litdata's loader profiler is not offered"
FN_FAILED = "fn's failure is an FnError naming the input, not litdata's 'We found the following error' text"
UNORDERED = "keep_data_ordered=False changes nothing: the order is kept, so checkpoints work"
NODE_ENV = "litdata's DATA_OPTIMIZER_NUM_NODES/NODE_RANK are not read: nodes come from num_nodes=/Slurm"
ALIGN_SHUFFLE = "shuffle=True mixes the items of a window of chunks: a batch spans chunks"
STATE = "the loader's state is shardwright's compact state, not litdata's keys"
FORCE = "force_override_state_dict= refused: a resume state is checked against its dataset"
CANONICAL = "num_canonical_nodes= refused: the order does not depend on nodes"
ANY = "environment: "  # outcome depends on the machine (network, optional packages): not asserted

SIGN: dict[str, tuple[str, ...]] = {
    MAP_FOLDER: (".shardwright",),
    CHUNK_NAMES: ("chunk-0-000", ".shardwright"),  # the diff names either first
    WEIGHTS: ("weights=...) is refused",),
    PLATFORM: ("optimize_dns=...) is refused",),
    IS_LAST: ("fn takes is_last",),
    KEY_FN: ("key_fn=...) is refused",),
    PROFILE: ("is refused: litdata's loader profiler is not offered",),
    FN_FAILED: ("Regex pattern did not match",),
    UNORDERED: ("DID NOT RAISE ValueError",),
    NODE_ENV: ("0-index.json",),
    ALIGN_SHUFFLE: ("contains elements from multiple chunks",),
    STATE: ("sample_in_epoch", "state_version", "num_canonical_nodes", "the state belongs to another dataset"),
    FORCE: ("force_override_state_dict=...) is refused",),
    CANONICAL: ("num_canonical_nodes=...) is refused",),
}


def _params(test: str, *params: str) -> dict[str, str]:
    return {f"{test}[{p}]": "" for p in params}


def _all(reason: str, *tests: str | dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for test in tests:
        for name in test if isinstance(test, dict) else (test,):
            out[name] = reason
    return out


DP, FN = "processing/test_data_processor.py::", "processing/test_functions.py::"
COMBINED, LOADER = "streaming/test_combined.py::", "streaming/test_dataloader.py::"

ELASTIC, PARALLEL = "streaming/test_elastic.py::", "streaming/test_parallel.py::"

# litdata v0.2.71 (its tests/ folder at tag v0.2.71, given at test time): 681 tests, 76
# public-name ones run (128 with their parameters). A name listed without parameters covers all.
EXPECTED_V0_2_71: dict[str, str] = {
    **_all(
        MAP_FOLDER,
        DP + "test_data_processing_map_non_absolute_path",
        DP + "test_data_processing_map_without_input_dir_and_folder",
        DP + "test_map_batch_size",
        DP + "test_data_processing_optimize_yield",
        DP + "test_map_keep_data_ordered_false_two_workers",
        FN + "test_map_with_path",
    ),
    **_all(
        CHUNK_NAMES,
        _params(
            FN + "test_optimize_align_chunking_creates_expected_chunks", "16-1", "16-2", "32-1", "32-2", "64-1", "64-2"
        ),
    ),
    **_all(
        WEIGHTS,
        DP + "test_data_processing_map_weights_mismatch",
        DP + "test_data_processing_map_without_input_dir_local",
    ),
    **_all(PLATFORM, _params(DP + "test_empty_optimize", "inputs0", "inputs1", "inputs2")),
    **_all(IS_LAST, _params(DP + "test_map_is_last", "1-expected0", "2-expected1")),
    DP + "test_optimize_writer_split_with_key_fn": KEY_FN,
    DP + "test_optimize_unordered_checkpoint_not_supported": UNORDERED,
    DP + "test_optimize_unordered_multi_node_env_splits_items": NODE_ENV,
    **_all(
        ANY + "needs soundfile (fails the same way on litdata without it)",
        _params(DP + "test_load_audio_bytes_optimize_and_stream", "None", "zstd"),
    ),
    FN + "test_optimize_checkpoint_in_none_and_append_mode": FN_FAILED,
    FN + "test_optimize_race_condition": ANY + "downloads from a public bucket (network)",
    "streaming/test_dataset.py::test_dataset_with_mosaic_mds_data": ANY + "needs mosaicml-streaming",
    # their datasets are ranges or stand-ins of litdata's dataset protocol, now accepted: the
    # rest of test_combined.py / test_parallel.py's such runs pass
    **_all(
        PROFILE,
        LOADER + "test_profile_cprofile_main_and_worker",
        LOADER + "test_profile_cprofile_num_workers_zero",
    ),
    **_all(ALIGN_SHUFFLE, _params(LOADER + "test_dataloader_with_align_chunking", "1", "2")),
    **_all(
        STATE,
        ELASTIC + "test_dataloader_elastic_workers_2_to_8",
        ELASTIC + "test_dataloader_strict_resume_same_workers_not_elastic",
        ELASTIC + "test_elastic_second_checkpoint_advances_cursor",
        ELASTIC + "test_num_canonical_nodes_defaults_to_initial_world_size",
        ELASTIC + "test_v1_same_topology_prefix_replay_still_runs",
    ),
    ELASTIC + "test_force_override_still_restripes_worker_mismatch": FORCE,
    ELASTIC + "test_num_canonical_nodes_frozen_across_resume": CANONICAL,
}
