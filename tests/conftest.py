"""Fixtures live in tests/support/ (s3_server, s3_bucket, s3_url, s3_storage_options, fault_proxy,
gcs_server, gcs_bucket, gcs_url, azure_server, azure_container, azure_url, slurm_cluster);
tests/ is on sys.path through setup.cfg's ``pythonpath = tests``.

Layout: ``tests/unit/`` is pure and in-process (no servers, no subprocess pools; ``pytest tests/unit``
is the fast loop); ``tests/system/`` runs real processes, the S3 server, the GCS and Azure
emulators, Slurm and the browser. Test file basenames are unique across the tree (the test
directories are not packages).

Tests that use the S3 server, a cloud emulator or the Slurm cluster are marked ``s3`` / ``gcs``
/ ``azure`` / ``slurm`` here, from the fixtures they ask for (also through a parametrized
``backend``), so ``pytest -m "not s3 and not gcs and not azure and not slurm"`` skips them."""

from __future__ import annotations

import os

import pytest

# Before google.auth is imported (it reads this once): nothing in the tests may probe a GCE
# metadata server.
os.environ.setdefault("NO_GCE_CHECK", "true")

pytest_plugins = ("support.s3_fixtures", "support.cloud_fixtures", "support.slurm_fixtures")

S3_FIXTURES = {"s3_server", "s3_bucket", "s3_url", "s3_storage_options", "fault_proxy"}
GCS_FIXTURES = {"gcs_server", "gcs_bucket", "gcs_url", "gcs_storage_options"}
AZURE_FIXTURES = {"azure_server", "azure_container", "azure_url", "azure_storage_options"}
SLURM_FIXTURES = {"slurm_cluster"}
SERVER_FIXTURES = S3_FIXTURES | GCS_FIXTURES | AZURE_FIXTURES | SLURM_FIXTURES
UNIT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unit") + os.sep


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        servers = used & SERVER_FIXTURES
        if servers and str(item.path).startswith(UNIT_DIR):
            raise pytest.UsageError(
                f"{item.nodeid} uses {', '.join(sorted(servers))}: a test that needs a server belongs in tests/system/"
            )
        if used & S3_FIXTURES:
            item.add_marker(pytest.mark.s3)
        if used & GCS_FIXTURES:
            item.add_marker(pytest.mark.gcs)
        if used & AZURE_FIXTURES:
            item.add_marker(pytest.mark.azure)
        if used & SLURM_FIXTURES:
            item.add_marker(pytest.mark.slurm)
