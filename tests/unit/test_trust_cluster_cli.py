"""Issue 33: a wrong RAY_ADDRESS is one line within seconds; k8s manifests refuse secrets in
--env and validate the namespace, service account and --max-failed-indexes."""

from __future__ import annotations

import socket
import time

import pytest

from shardwright.cluster.kubernetes import JobSpec
from shardwright.cluster.ray_probe import probe_ray_address
from shardwright.errors import UsageError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is: nothing listens there


def test_a_wrong_ray_address_is_one_line_within_seconds():
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(UsageError, match=rf"RAY_ADDRESS=127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"):
        probe_ray_address({"RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert time.monotonic() - start < 10
    with pytest.raises(UsageError, match="ray://127.0.0.1"):
        probe_ray_address({"RAY_ADDRESS": f"ray://127.0.0.1:{port}"})


def test_a_live_address_and_no_address_pass():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        probe_ray_address({"RAY_ADDRESS": f"127.0.0.1:{server.getsockname()[1]}"})
    probe_ray_address({})
    probe_ray_address({"RAY_ADDRESS": "auto"})


def _spec(**kw) -> JobSpec:
    base = {"name": "sw", "image": "img", "command": ["python", "x.py"], "completions": 4}
    return JobSpec(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"env": {"AWS_SECRET_ACCESS_KEY": "abcd1234abcd"}},
            r"--env AWS_SECRET_ACCESS_KEY=\.\.\. would write a secret.*--secret NAME",
        ),
        ({"env": {"HF_TOKEN": "hf_x"}}, "put it in a Secret"),
        ({"namespace": "My_NS"}, "--namespace 'My_NS' is not a valid namespace"),
        ({"service_account": "Bad Account"}, "--service-account 'Bad Account' is not a valid ServiceAccount"),
        ({"max_failed_indexes": -1}, r"--max-failed-indexes must be 0\.\.4"),
        ({"max_failed_indexes": 9}, r"--max-failed-indexes must be 0\.\.4"),
    ],
)
def test_k8s_manifest_mistakes_are_one_line(kw, message):
    with pytest.raises(UsageError, match=message):
        _spec(**kw).validate()


def test_k8s_manifest_valid_names_pass():
    _spec(namespace="data-prep", service_account="sw.runner", max_failed_indexes=2, env={"LOG_LEVEL": "1"}).validate()
