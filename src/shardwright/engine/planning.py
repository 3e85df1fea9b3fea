"""Planning a call: the inputs it was given, and which share of the shards this node runs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..errors import ArgumentTypeError, InputsError, OutputDirError, UsageError
from ..storage import Location, parse_location
from .inputs import RunInputs, run_inputs


def _source_hint(inputs: object) -> str | None:
    """The shardwright.sources call for inputs that have one (no import of their libraries)."""
    kind = type(inputs)
    module, name = kind.__module__.split(".")[0], kind.__name__
    if isinstance(inputs, (str, os.PathLike)):
        return (
            f"inputs is a path ({os.fspath(inputs)!r}), not a sequence of inputs: read its files with "
            "sources.files(path), sources.jsonl(path) or sources.parquet(path), or pass [path] for one input"
        )
    if module == "pandas" and name == "DataFrame":
        return (
            "inputs is a pandas DataFrame: pass its rows as inputs with df.to_dict('records'), or write it "
            "to parquet and pass sources.parquet(path) (read lazily, where it is needed)"
        )
    if module == "datasets" and name in ("Dataset", "DatasetDict"):
        return "inputs is a Hugging Face datasets.Dataset: pass sources.hf(dataset) (rows read lazily by the workers)"
    if module == "datasets" and name in ("IterableDataset", "IterableDatasetDict"):
        return (
            "inputs is a Hugging Face IterableDataset, which has no len() or indexing: load it with "
            "datasets.load_dataset(..., streaming=False) and pass sources.hf(dataset), or read its files "
            "with sources.parquet / sources.jsonl"
        )
    return None


def check_inputs(inputs: object, transform: Callable[[Sequence], Sequence] | None = None) -> RunInputs:
    """The call's ``inputs`` checked, passed through ``transform`` (litdata's batch_size and
    fast_dev_run), as the one object the engine asks about them."""
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        hint = _source_hint(inputs)
        if hint is not None:
            raise InputsError(hint)
        kind = type(inputs).__name__
        raise InputsError(
            f"inputs must be a sequence with len() and indexing (list, tuple, range); got {kind}. "
            "Wrap an iterator or generator in list(...) first."
        )
    try:
        inputs[0:0]
    except InputsError:
        raise  # a source's own line (a cut .jsonl.gz: InputsError is a TypeError too)
    except TypeError:
        # a collections.deque is a Sequence, but cannot be sliced (and indexing its middle is
        # O(n)): shards are read as slices, so it must be a list first
        raise InputsError(
            f"inputs is a {type(inputs).__name__}, which cannot be sliced (inputs[a:b]); shards read their "
            "inputs as slices. Pass list(inputs) instead"
        ) from None
    return run_inputs(transform(inputs) if transform is not None else inputs)


def check_output_dir(output_dir: object) -> Location:
    """The writer's check of ``output_dir``, before anything is created: a str or path that
    :func:`~shardwright.storage.parse_location` accepts (so "" and a mistyped URL such as
    "s3:/bucket", a valid local folder named "s3:", never write somewhere else), with its
    scheme spelled as written in the dataset's records (lower case)."""
    if isinstance(output_dir, os.PathLike):
        output_dir = os.fspath(output_dir)
    if not isinstance(output_dir, str):
        raise ArgumentTypeError(
            f"output_dir must be a str or a path (a local directory or 's3://bucket/prefix'); got "
            f"{type(output_dir).__name__}"
        )
    location = parse_location(output_dir)
    if not location.is_local and not output_dir.startswith(f"{location.scheme}://"):
        raise OutputDirError(
            f"output_dir {output_dir!r} spells its URL scheme in capitals; write it as {location.url!r}"
        )
    return location


@dataclass(frozen=True)
class NodeIdentity:
    rank: int
    count: int
    source: str  # where it came from (a label)
    variables: str = ""  # the environment variables it was read from, with their values

    @property
    def origin(self) -> str:
        """Where it came from, for messages: a leftover export must be recognisable by name."""
        return f"{self.source}: {self.variables}" if self.variables else self.source

    @property
    def is_multi_node(self) -> bool:
        return self.count > 1


_ENV_PAIRS = (
    # (rank variable, count variable, label); the first pair that is set wins.
    ("DATA_OPTIMIZER_NODE_RANK", "DATA_OPTIMIZER_NUM_NODES", "litdata's DATA_OPTIMIZER_* variables"),
    ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "the Slurm job array"),
    ("SLURM_PROCID", "SLURM_NTASKS", "the Slurm step (srun)"),
)


def _parse_int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not an integer") from None


KUBERNETES = "the Kubernetes Indexed Job"
K8S_COUNT_VARS = ("SHARDWRIGHT_NUM_NODES", "DATA_OPTIMIZER_NUM_NODES")


def _kubernetes(env: Mapping[str, str]) -> NodeIdentity | None:
    """An Indexed Job's pod: its completion index is the rank; the count is not in a pod's
    environment, so the manifest sets SHARDWRIGHT_NUM_NODES (or litdata's variable)."""
    if "JOB_COMPLETION_INDEX" not in env or "DATA_OPTIMIZER_NODE_RANK" in env:
        return None
    count_var = next((v for v in K8S_COUNT_VARS if v in env), None)
    if count_var is None:
        raise UsageError(
            "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but the number of pods is not: set "
            "SHARDWRIGHT_NUM_NODES to the Job's completions in the pod's env (`shardwright k8s manifest` does)"
        )
    index = env["JOB_COMPLETION_INDEX"]
    rank, count = _parse_int("JOB_COMPLETION_INDEX", index), _parse_int(count_var, env[count_var])
    return _validated(rank, count, KUBERNETES, f"JOB_COMPLETION_INDEX={index}, {count_var}={env[count_var]}")


def node_identity(num_nodes: int | None, node_rank: int | None, env: Mapping[str, str] | None = None) -> NodeIdentity:
    """Which share of the shards this process runs: explicit arguments win, then litdata's
    variables, then a Kubernetes Indexed Job, then a Slurm array, then an srun step; a single
    node otherwise. (Which *host* this is: ``shardwright.process.host_identity``.)"""
    if env is None:
        env = os.environ
    if (num_nodes is None) != (node_rank is None):
        raise UsageError(
            "pass both num_nodes and node_rank (or neither, to read them from the environment); "
            f"got num_nodes={num_nodes}, node_rank={node_rank}"
        )
    if num_nodes is not None and node_rank is not None:
        return _validated(node_rank, num_nodes, "the num_nodes/node_rank arguments")
    pod = _kubernetes(env)
    if pod is not None:
        return pod
    for rank_var, count_var, label in _ENV_PAIRS:
        if rank_var == "SLURM_PROCID":
            if "SLURM_JOB_ID" in env and "SLURM_STEP_ID" not in env:
                # A batch script itself, not an srun step: Slurm sets SLURM_PROCID=0 there, and
                # SLURM_NTASKS only with -n (the allocation's size, not processes running this
                # code). One process runs here, so it is the whole run.
                continue
            if "SLURM_STEP_NUM_TASKS" in env:
                count_var = "SLURM_STEP_NUM_TASKS"  # `srun -n K` in a larger allocation
        has_rank, has_count = rank_var in env, count_var in env
        if has_rank != has_count:
            present, missing = (rank_var, count_var) if has_rank else (count_var, rank_var)
            raise UsageError(
                f"{present} is set but {missing} is not, so this node cannot know its share of the work; "
                f"set both, or pass num_nodes= and node_rank= to optimize()"
            )
        if has_rank:
            rank = _parse_int(rank_var, env[rank_var])
            count = _parse_int(count_var, env[count_var])
            variables = f"{rank_var}={env[rank_var]}, {count_var}={env[count_var]} in the environment"
            if rank_var == "SLURM_ARRAY_TASK_ID":
                # --array=4-10:2 gives ids 4, 6, 8, 10: ranks 0..3
                rank -= _parse_int("SLURM_ARRAY_TASK_MIN", env.get("SLURM_ARRAY_TASK_MIN", "0"))
                step = _parse_int("SLURM_ARRAY_TASK_STEP", env.get("SLURM_ARRAY_TASK_STEP", "1"))
                if step > 1 and rank % step == 0:
                    rank //= step
            return _validated(rank, count, label, variables)
    return NodeIdentity(0, 1, "a single node")


def _validated(rank: int, count: int, source: str, variables: str = "") -> NodeIdentity:
    node = NodeIdentity(rank, count, source, variables)
    if count < 1 or not 0 <= rank < count:
        raise UsageError(
            f"node rank {rank} of {count} nodes (from {node.origin}) is out of range: need 0 <= rank < count"
        )
    return node
