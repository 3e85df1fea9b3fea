"""pytest fixtures for a real S3 server (SeaweedFS) and a fault-injecting proxy in front of it.

Loaded by tests/conftest.py (``pytest_plugins``).

* ``s3_server`` (session): one SeaweedFS for the whole run, started on free loopback ports
  (about 1 s) or, if ``SHARDWRIGHT_TEST_S3_ENDPOINT``/``..._ACCESS_KEY``/``..._SECRET_KEY`` are
  set (``eval "$(python tests/support/s3server.py start)"``), the server they name. Attributes:
  ``endpoint``, ``access_key``, ``secret_key``, ``storage_options``, ``client()``,
  ``create_bucket()``.
* ``s3_bucket``: a fresh, empty bucket for this test (deleted afterwards).
* ``s3_url``: ``s3://<fresh bucket>/data``.
* ``s3_storage_options``: the dict to pass as ``storage_options`` (endpoint + credentials).
* ``fault_proxy``: a :class:`faultproxy.FaultProxy` in front of the server, no faults until
  configured (``fault_proxy.configure(p_503=0.2, p_reset=0.1, p_truncate=0.1)``); its
  ``storage_options`` attribute routes through the proxy.
"""

from __future__ import annotations

import os

import pytest

from .faultproxy import FaultProxy
from .s3server import S3Server, find_weed

__all__ = ["s3_server", "s3_bucket", "s3_url", "s3_storage_options", "fault_proxy"]


@pytest.fixture(scope="session")
def s3_server():
    srv = S3Server.from_env()
    if srv is None:
        try:
            find_weed()
        except FileNotFoundError as e:
            pytest.skip(str(e))
        srv = S3Server().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def s3_bucket(s3_server):
    name = s3_server.create_bucket()
    yield name
    try:
        s3_server.delete_bucket(name)
    except Exception:
        pass


@pytest.fixture
def s3_url(s3_bucket):
    return f"s3://{s3_bucket}/data"


@pytest.fixture
def s3_storage_options(s3_server):
    return dict(s3_server.storage_options)


@pytest.fixture
def fault_proxy(s3_server):
    host_port = s3_server.endpoint.split("://", 1)[1]
    proxy = FaultProxy(host_port, seed=int.from_bytes(os.urandom(4), "little")).start()
    proxy.storage_options = dict(s3_server.storage_options, endpoint_url=proxy.endpoint)
    try:
        yield proxy
    finally:
        proxy.stop()
