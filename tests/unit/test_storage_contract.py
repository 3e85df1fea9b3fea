"""The storage contract (tests/support/storage_contract.py) on the in-process backends: the
memory store and a local directory. The object stores run it in tests/system/test_storage.py."""

from __future__ import annotations

import itertools
import os

import pytest

from shardwright.storage import MemoryStorage, Storage, open_storage
from support.storage_contract import StorageContract

_names = itertools.count()


class TestMemoryStorage(StorageContract):
    multi_process = False
    keeps_raw_names = True

    @pytest.fixture
    def make_storage(self, request):
        def make(extra_options: dict | None = None) -> Storage:
            name = f"contract-{os.getpid()}-{next(_names)}"
            request.addfinalizer(lambda: MemoryStorage.drop(name))
            return open_storage(f"memory://{name}")

        return make


class TestLocalStorage(StorageContract):
    local_files = True
    fsync_barrier = True

    @pytest.fixture
    def make_storage(self, tmp_path):
        counter = itertools.count()

        def make(extra_options: dict | None = None) -> Storage:
            return open_storage(tmp_path / f"out{next(counter)}", create=True)

        return make
