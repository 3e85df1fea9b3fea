"""pytest fixtures for the Google Cloud Storage and Azure Blob emulators.

Loaded by tests/conftest.py (``pytest_plugins``); the servers are in
:mod:`support.cloudemulators`. One server of each per session, started on first use.

* ``gcs_server`` (session): fake-gcs-server; sets ``STORAGE_EMULATOR_HOST`` (and
  ``NO_GCE_CHECK=true``) in this process's environment for the session, so shardwright, its
  worker processes and the CLI subprocesses all reach it with anonymous credentials.
* ``gcs_bucket`` / ``gcs_url`` (``gs://<fresh bucket>/data``) / ``gcs_storage_options`` ({}).
* ``azure_server`` (session): Azurite's blob service (development account).
* ``azure_container`` / ``azure_url`` (``az://<fresh container>/data``) /
  ``azure_storage_options`` ({"connection_string": ...}: connection strings only, never
  DefaultAzureCredential, which would probe an instance-metadata address).
"""

from __future__ import annotations

import os

import pytest

from .cloudemulators import AzuriteServer, GCSServer, find_azurite, find_fake_gcs_server

__all__ = [
    "azure_container",
    "azure_server",
    "azure_storage_options",
    "azure_url",
    "gcs_bucket",
    "gcs_server",
    "gcs_storage_options",
    "gcs_url",
]


def _required(find, what: str) -> None:
    try:
        find()
    except FileNotFoundError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{what}: {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def gcs_server():
    _required(find_fake_gcs_server, "fake-gcs-server")
    srv = GCSServer().start()
    saved = {k: os.environ.get(k) for k in srv.env}
    os.environ.update(srv.env)
    try:
        yield srv
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        srv.stop()


@pytest.fixture
def gcs_bucket(gcs_server):
    name = gcs_server.create_bucket()
    yield name
    try:
        gcs_server.delete_bucket(name)
    except Exception:
        pass


@pytest.fixture
def gcs_url(gcs_bucket):
    return f"gs://{gcs_bucket}/data"


@pytest.fixture
def gcs_storage_options(gcs_server):
    return {}


@pytest.fixture(scope="session")
def azure_server():
    _required(find_azurite, "Azurite")
    srv = AzuriteServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def azure_container(azure_server):
    name = azure_server.create_container()
    yield name
    try:
        azure_server.delete_container(name)
    except Exception:
        pass


@pytest.fixture
def azure_url(azure_container):
    return f"az://{azure_container}/data"


@pytest.fixture
def azure_storage_options(azure_server):
    return dict(azure_server.storage_options)
