"""engine.identity.fn_identity and the FnIdentity record: what is hashed by value, what is
skipped, how two identities compare, and that a damaged record is refused."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from shardwright.engine.identity import fn_identity
from shardwright.errors import CorruptStateError
from shardwright.protocol.fn_identity import FnIdentity

SCALE = 3
TABLE = {"a": (1, 2.5, "x", b"y", None, True), "b": [np.int32(4), np.arange(5)]}


def uses_globals(i):
    return math.floor(i * SCALE) + len(TABLE) + len(np.zeros(1))  # math, np, len: code, not config


class Slotted:
    __slots__ = ("k", "model")

    def __init__(self, k):
        self.k = k
        self.model = object()

    def __call__(self, i):
        return i * self.k


def work(i, *, factor, offset=0):
    return i * factor + offset


def test_globals_are_hashed_by_value_and_code_references_are_not_followed():
    identity = fn_identity(uses_globals)
    assert set(identity.config) == {"global SCALE", "global TABLE"}
    assert identity.skipped == ()


def test_equal_values_give_equal_digests_and_any_change_is_named():
    a = fn_identity(functools.partial(work, factor=2))
    b = fn_identity(functools.partial(work, factor=2))
    c = fn_identity(functools.partial(work, factor=2, offset=1))
    assert a.config == b.config and a.config_changes(b) == []
    assert c.config_changes(a) == ["partial argument offset"]
    assert fn_identity(functools.partial(work, factor=2.0)).config_changes(a) == ["partial argument factor"]


def test_slots_and_unhashable_state_are_named():
    identity = fn_identity(Slotted(2))
    assert "self.k" in identity.config
    assert identity.skipped == ("self.model (object)",)
    assert fn_identity(Slotted(3)).config_changes(identity) == ["self.k"]


def test_large_arrays_are_skipped_small_ones_hashed():
    small, large = np.arange(10), np.zeros(1_000_000)

    def f(i):
        return small[0] + large[0]

    identity = fn_identity(f)
    assert "closure small" in identity.config
    assert identity.skipped == ("closure large (ndarray: a 8,000,000-byte array)",)


def test_builtins_and_lambdas_never_fail():
    assert fn_identity(len).config == {}
    assert fn_identity(lambda i: i).config == {}


def test_record_round_trips_and_older_records_compare_as_unchanged():
    identity = fn_identity(functools.partial(work, factor=2))
    assert FnIdentity.from_json(identity.to_json(), "here") == identity
    older = FnIdentity(name=identity.name, code=identity.code)  # recorded before configuration was
    assert identity.config_changes(older) == [] and not identity.code_changed(older)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"name": 3},
        {"name": "f", "code": "x" * 100},
        {"name": "f", "config": {"a": "not-hex"}},
        {"name": "f", "config": {"a": "ab"}, "skipped": "oops"},
    ],
)
def test_damaged_records_are_refused(data):
    with pytest.raises(CorruptStateError, match="fn identity in manifest"):
        FnIdentity.from_json(data, "manifest")
