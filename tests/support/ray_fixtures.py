"""pytest fixture for a real local Ray cluster of 3 nodes on 127.0.0.1 (ray.cluster_utils).

Loaded by tests/conftest.py (``pytest_plugins``); tests that use it are marked ``ray``.

* ``ray_cluster`` (session): :class:`RayTestCluster` with a head and two worker nodes, one
  CPU each, all listening on loopback only (``node_ip_address="127.0.0.1"`` and
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), usage stats off, its own temp dir. One cluster per
  session (it takes ~6 s to start on 2 cores); a test that removes a node calls
  ``restore()`` (or ``ensure_nodes()``) so the next one finds 3 nodes again. Shut down at the
  end of the session, also when tests failed.
* ``no_ray_driver_left_behind`` (autouse): after each test, a Ray connection of this process is
  closed (``ray.shutdown()``), so no later test forks a process holding a Ray driver's threads.
* ``env`` of the cluster: what a driver subprocess needs (``RAY_ADDRESS``, the temp dir,
  ``PYTHONPATH`` with this checkout's src); :func:`start_driver` starts one
  (tests/support/crash_child.py with a config) in its own session.

The nodes' processes inherit this process's environment when they start: the fixture puts
the checkout's src on PYTHONPATH (tasks import shardwright) and a long lease TTL
(``SHARDWRIGHT_LEASE_TTL``), so a test that finishes quickly after a node loss proves the
dead node's claims were taken over at once, not after the TTL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .helpers import CHILD

__all__ = ["ray_cluster", "no_ray_driver_left_behind", "start_driver", "RayTestCluster", "LEASE_TTL"]

# Read by Ray when it is imported (ray_constants), so set when pytest loads this plugin, before
# any test imports ray: without it ray.init() in this process swaps 127.0.0.1 for the
# machine's interface address and hangs.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

SRC = str(Path(__file__).resolve().parent.parent.parent / "src")
# seconds: longer than any Ray test may take (pytest's timeout is 300 s), so a claim waited out
# instead of taken over fails the test at any load, without a bound on how long the run took
LEASE_TTL = "600"


class RayTestCluster:
    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="swray-", dir="/tmp")  # short: Ray's socket paths are bounded
        os.makedirs(os.path.join(self.temp, "ray"))
        self.saved = {k: os.environ.get(k) for k in self._env()}
        os.environ.update(self._env())
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "node_ip_address": "127.0.0.1",
                "temp_dir": os.path.join(self.temp, "ray"),
                "include_dashboard": False,
            },
        )
        self.workers: list = []
        self.ensure_nodes(3)
        self.address = self.cluster.address
        self.cluster.wait_for_nodes()

    def _env(self) -> dict[str, str]:
        path = os.environ.get("PYTHONPATH", "")
        return {
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": self.temp,
            "PYTHONPATH": SRC + (os.pathsep + path if path and SRC not in path.split(os.pathsep) else ""),
            "SHARDWRIGHT_LEASE_TTL": LEASE_TTL,
        }

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self._env(), "RAY_ADDRESS": self.address}

    def ensure_nodes(self, count: int) -> None:
        while 1 + len(self.workers) < count:
            self.workers.append(self.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1"))
        self.cluster.wait_for_nodes()

    def remove_worker_node(self) -> None:
        """Kill a worker node (its raylet and every worker process on it), as a lost machine."""
        node = self.workers.pop()
        self.cluster.remove_node(node, allow_graceful=False)

    def restore(self) -> None:
        self.ensure_nodes(3)

    def alive_nodes(self) -> int:
        import ray

        return sum(1 for n in ray.nodes() if n.get("Alive"))

    def shutdown(self) -> None:
        try:
            import ray

            ray.shutdown()
        finally:
            try:
                self.cluster.shutdown()
            finally:
                for key, value in self.saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_ray_driver_left_behind():
    """A test that connected this process to Ray (``ray.init``) is disconnected after it: the
    driver's threads, left running, make a later test's fork (a DataLoader's workers, a
    process pool) hang on a lock one of them held at the fork."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_cluster():
    try:
        import ray.cluster_utils  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Ray is not installed in CI: {exc}", pytrace=False)
        pytest.skip(f"Ray is not installed: {exc}")
    cluster = None
    try:
        cluster = RayTestCluster()
        yield cluster
    finally:
        if cluster is not None:
            cluster.shutdown()


def start_driver(ray_cluster: RayTestCluster, config: dict) -> subprocess.Popen:
    """A Ray driver: crash_child.py running ``config`` against the cluster, in its own session
    (kill_group reaches it and its process group only), stdout and stderr piped as text."""
    return subprocess.Popen(
        [sys.executable, CHILD, json.dumps(config)],
        env=ray_cluster.env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
