"""Fixtures live in tests/support/ (s3_server, s3_bucket, s3_url, s3_storage_options, fault_proxy,
slurm_cluster); tests/ is on sys.path through setup.cfg's ``pythonpath = tests``.

Layout: ``tests/unit/`` is pure and in-process (no servers, no subprocess pools; ``pytest tests/unit``
is the fast loop); ``tests/system/`` runs real processes, the S3 server, Slurm, Ray and the browser.
Test file basenames are unique across the tree (the test directories are not packages).

Tests that use the S3 server, the Slurm cluster or the Ray cluster are marked ``s3`` / ``slurm`` /
``ray`` here, from the fixtures they ask for, so ``pytest -m "not s3 and not slurm and not ray"``
skips those three."""

from __future__ import annotations

import pytest

pytest_plugins = ("support.s3_fixtures", "support.slurm_fixtures", "support.ray_fixtures")

S3_FIXTURES = {"s3_server", "s3_bucket", "s3_url", "s3_storage_options", "fault_proxy"}
SLURM_FIXTURES = {"slurm_cluster"}
RAY_FIXTURES = {"ray_cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & S3_FIXTURES:
            item.add_marker(pytest.mark.s3)
        if used & SLURM_FIXTURES:
            item.add_marker(pytest.mark.slurm)
        if used & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)
