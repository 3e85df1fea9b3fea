"""pytest fixture for a real single-host Slurm cluster (see tests/support/slurm_cluster.py).

Loaded by tests/conftest.py (``pytest_plugins``).

* ``slurm_cluster`` (session): a running :class:`slurm_cluster.SlurmCluster` with nodes
  n1..n3 (2 CPUs each), partitions ``main`` (default) and ``urgent`` (preempts ``main``
  by requeue). Started once per session (~0.5 s; the first job is scheduled ~3 s after
  start-up), stopped at the end. Use ``slurm_cluster.env`` for your own subprocesses,
  ``slurm_cluster.sbatch(text, *args)``, ``wait_job(job_id, timeout)``, ``requeue(..)``,
  ``set_node_state(..)``, ``shared_dir``.
  Set ``SHARDWRIGHT_TEST_SLURM_DIR`` to reuse a cluster started with
  ``python tests/support/slurm_cluster.py up --dir DIR`` (it is then left running).

Outside CI the fixture skips (with the reason) when slurm/munge are not installed or we
are not root; with ``CI=true`` that is a failure, so CI cannot go green by skipping.
"""

from __future__ import annotations

import os

import pytest

from .slurm_cluster import SlurmCluster, missing_binaries

__all__ = ["slurm_cluster"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"Slurm test cluster unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    existing = os.environ.get("SHARDWRIGHT_TEST_SLURM_DIR")
    if existing:
        cluster = SlurmCluster.attach(existing)
        cluster.wait_ready(30)
        yield cluster
        return
    missing = missing_binaries()
    if missing:
        _unavailable(
            f"missing {', '.join(missing)}; install with `apt-get install slurm-wlm munge` "
            "(or run scripts/setup-env.sh --slurm as root)"
        )
    if os.geteuid() != 0:
        _unavailable("the test cluster must be started as root")
    cluster = SlurmCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
