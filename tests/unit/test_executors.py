"""The engine's executor registry and the engine options: one clear line per mistake, raised
before anything is written, and the default stays local even when RAY_ADDRESS is set."""

from __future__ import annotations

import pytest

from shardwright import ArgumentTypeError, UsageError, optimize
from shardwright.engine.executors import executor_names, get_executor
from shardwright.engine.options import OptimizeOptions


def ident(i):
    return {"i": i}


def test_ray_is_registered_by_the_cluster_package_without_importing_it():
    import sys

    assert executor_names() == ["local", "ray"]
    assert "shardwright.cluster.ray" not in sys.modules or "ray" in sys.modules  # lazy: only when named


def test_an_unknown_executor_names_the_known_ones(tmp_path):
    with pytest.raises(UsageError, match=r"executor='dask' is not known; use one of 'local', 'ray'"):
        optimize(ident, [1, 2], tmp_path / "out", executor="dask", verbose=False)
    assert not (tmp_path / "out").exists(), "refused before anything is written"
    with pytest.raises(UsageError):
        get_executor("nope")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"executor": 3}, ArgumentTypeError, "executor must be a name"),
        ({"ray_remote_args": {"num_cpus": 1}}, UsageError, "only used with executor='ray'"),
        ({"executor": "ray", "ray_remote_args": [1]}, ArgumentTypeError, "ray_remote_args must be a dict"),
        ({"failed_dir": ""}, ArgumentTypeError, "failed_dir must be"),
        ({"shared_output": "yes"}, ArgumentTypeError, "shared_output must be True or False"),
    ],
)
def test_engine_option_mistakes(kwargs, error, message):
    with pytest.raises(error, match=message):
        OptimizeOptions.validate(ident, **kwargs)


def test_failed_dir_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SHARDWRIGHT_FAILED_DIR", "s3://bucket/failures")
    assert OptimizeOptions.validate(ident).engines.failed_dir == "s3://bucket/failures"
    assert OptimizeOptions.validate(ident, failed_dir="/x").engines.failed_dir == "/x"
