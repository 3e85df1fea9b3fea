"""Pure planning logic: shards, node identity, the inputs' fingerprint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from shardwright.engine.options import OptimizeOptions
from shardwright.engine.planning import check_inputs, node_identity
from shardwright.errors import InputsError, RunMismatchError, ShardwrightError
from shardwright.protocol.decide import Request, check_same_run
from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.manifest import Manifest, OutputSettings
from shardwright.protocol.shards import default_num_shards, shard_bounds, shards_of_node


@pytest.mark.parametrize("n,shards", [(0, 1), (1, 1), (10, 10), (1000, 64), (1001, 7)])
def test_shards_cover_every_input_once_in_order(n, shards):
    covered = []
    for s in range(shards):
        start, end = shard_bounds(n, shards, s)
        assert end - start in (n // shards, n // shards + 1)
        covered.extend(range(start, end))
    assert covered == list(range(n))


@pytest.mark.parametrize(
    "num_inputs, shards",
    [
        (0, 1),  # no inputs: one (empty) shard
        (1, 1),  # never more shards than inputs
        (5, 5),
        (20_000, 16),
        (200_000, 16),
        (400_000, 16),
        (400_001, 17),  # past 16 x INPUTS_PER_SHARD: one shard per 25,000 inputs
        (10**6, 40),
        (10**7, 400),
        (10**12, 100_000),  # capped at MAX_NUM_SHARDS
    ],
)
def test_default_num_shards_comes_from_the_inputs_alone(num_inputs, shards):
    assert default_num_shards(num_inputs) == shards


def test_default_num_shards_is_the_same_for_any_worker_or_node_count():
    # issue 35: the shards (hence chunks) of the same inputs do not depend on the parallelism
    async def fetch(x):
        return x

    opts = [OptimizeOptions.validate(str, num_workers=w) for w in (1, 2, 16)]
    opts += [OptimizeOptions.validate(fetch, num_workers=w, concurrency=c) for w in (1, 4) for c in (1, 64)]
    assert {o.output_settings(200_000).num_shards for o in opts} == {16}


def test_nodes_split_shards_round_robin_without_overlap():
    owned = [shards_of_node(10, rank, 3) for rank in range(3)]
    assert owned == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert shards_of_node(2, 2, 4) == []  # more nodes than shards: nothing to do, no error


def test_fingerprint_of_a_million_inputs_is_fast_and_small():
    inputs = list(range(1_000_000))
    started = time.perf_counter()
    fingerprint = InputsFingerprint.of(inputs)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"hashing 1M inputs took {elapsed:.2f} s"
    assert len(fingerprint.block_hashes) == 16 * 3907  # 62 KB: small, and never the inputs themselves


def test_fingerprint_names_the_first_change():
    base = InputsFingerprint.of(list(range(5000)))
    changed = list(range(5000))
    changed[1234] = -1
    assert "between 1,024 and 1,279" in base.first_difference(InputsFingerprint.of(changed))
    assert "had 5,000 inputs, this call has 4,999" in base.first_difference(InputsFingerprint.of(range(4999)))
    assert base.first_difference(InputsFingerprint.of(range(5000))) is None


def test_fingerprint_is_stable_for_equal_values_that_are_different_objects():
    a = Path("/data/x.jpg")
    same_object = [a, a, ("t", 1), {"k": "v"}]
    equal_objects = [Path("/data/x.jpg"), Path("/data/x.jpg"), ("t", 1), {"k": "v"}]
    assert InputsFingerprint.of(same_object) == InputsFingerprint.of(equal_objects)


def test_fingerprint_rejects_unpicklable_inputs_naming_the_input():
    with pytest.raises(InputsError, match=r"input 2 .*cannot be pickled"):
        InputsFingerprint.of([1, 2, lambda: 3])


@pytest.mark.parametrize("bad", [iter([1, 2]), (x for x in [1]), 5, "abc", {1, 2}])
def test_inputs_must_be_a_sequence(bad):
    with pytest.raises(InputsError, match="sequence"):
        check_inputs(bad)


def test_settings_change_names_the_setting_and_the_fix():
    inputs = InputsFingerprint.of([1, 2, 3])
    recorded = Manifest(
        run_id="r",
        generation=0,
        mode="create",
        num_inputs=3,
        num_shards=1,
        inputs=inputs.to_json(),
        settings=OutputSettings(100, None, None, 1),
        use_checkpoint=True,
        base_chunks=[],
        base_config=None,
        fn_name="f",
        created_at=0.0,
    )
    request = Request(
        mode=None, inputs=inputs, settings=OutputSettings(200, None, None, 1), fn_name="f", use_checkpoint=True
    )
    with pytest.raises(RunMismatchError, match=r"chunk_size was 100, now 200; rerun with chunk_size=100"):
        check_same_run(recorded, request, "out")


def test_node_identity_sources_and_precedence():
    assert node_identity(None, None, {}) == node_identity(None, None, {})
    assert node_identity(None, None, {}).count == 1
    assert node_identity(4, 2, {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}).rank == 2
    env = {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "4"}
    assert (node_identity(None, None, env).rank, node_identity(None, None, env).count) == (3, 4)
    env = {
        "SLURM_ARRAY_TASK_ID": "8",
        "SLURM_ARRAY_TASK_COUNT": "4",
        "SLURM_ARRAY_TASK_MIN": "4",
        "SLURM_ARRAY_TASK_STEP": "2",
    }
    assert (node_identity(None, None, env).rank, node_identity(None, None, env).count) == (2, 4)
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3"}
    assert (node_identity(None, None, env).rank, node_identity(None, None, env).count) == (1, 3)
    env = {"DATA_OPTIMIZER_NODE_RANK": "1", "DATA_OPTIMIZER_NUM_NODES": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert node_identity(None, None, env).rank == 1  # litdata's variables win over srun's


@pytest.mark.parametrize(
    "env", [{"SLURM_ARRAY_TASK_ID": "1"}, {"SLURM_ARRAY_TASK_COUNT": "3"}, {"DATA_OPTIMIZER_NODE_RANK": "0"}]
)
def test_only_one_of_rank_and_count_is_a_clear_error(env):
    with pytest.raises(ShardwrightError, match="is set but"):
        node_identity(None, None, env)


def test_node_identity_argument_errors():
    with pytest.raises(ShardwrightError, match="both num_nodes and node_rank"):
        node_identity(2, None, {})
    with pytest.raises(ShardwrightError, match="out of range"):
        node_identity(2, 2, {})


def test_a_list_is_shared_with_forked_workers_only_while_their_pool_runs():
    """Tasks over a registered list carry three ints; unpickled where the registry is (a
    worker forked while it was set) they are the list's slice; elsewhere, a clear error."""
    import pickle

    from shardwright.engine.inputs import InheritedSlice, shared_inputs

    values = [f"/data/{i}.jpg" for i in range(25_000)]
    with shared_inputs(values, "spawn") as nothing:
        assert nothing is None  # spawned workers have no copy: their tasks carry the values
    with shared_inputs(tuple(values), "fork") as nothing:
        assert nothing is None  # only a list (the object the tasks are cut from) is shared
    with shared_inputs(values, "fork") as shared:
        assert shared is not None and shared.values is values
        piece = InheritedSlice(shared.token, 100, 200)
        sent = pickle.dumps(piece)
        assert len(sent) < 100 and pickle.loads(sent) == values[100:200] and len(piece) == 100
    with pytest.raises(RuntimeError, match="did not fork from its run"):
        pickle.loads(sent)  # the run is over: its registry entry is gone
