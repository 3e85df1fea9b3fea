"""Issue 33 BAD 7: a configuration held in a dataclass, pydantic model, attrs class, enum or
namedtuple is part of fn's identity, hashed by value (field by field for the first three),
and a run recorded before (which listed such an object as skipped) still resumes."""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import typing

import pytest

from shardwright.engine.identity import fn_identity
from shardwright.protocol.fn_identity import FnIdentity


@dataclasses.dataclass(frozen=True)
class Cfg:
    temperature: float = 0.7
    samples_per_page: int = 3
    tags: tuple = ("a",)


try:  # optional here: the unit layer also runs on Pythons with the core dependencies only
    import pydantic

    class Model(pydantic.BaseModel):
        teacher: str = "http://127.0.0.1:1/v1"
        samples_per_page: int = 3
        inner: Cfg = Cfg()

except ImportError:
    pydantic = None  # type: ignore[assignment]

try:
    import attrs

    @attrs.define
    class AttrsCfg:
        k: int = 1

except ImportError:
    attrs = None  # type: ignore[assignment]


class Color(enum.Enum):
    RED = 1
    BLUE = 2


Pair = collections.namedtuple("Pair", "a b")


class Typed(typing.NamedTuple):
    a: int
    b: str


def work(i, config):
    return i


def test_a_dataclass_config_is_hashed_by_value_and_a_changed_field_is_named():
    a = fn_identity(functools.partial(work, config=Cfg()))
    assert a.skipped == ()
    assert fn_identity(functools.partial(work, config=Cfg())).config_changes(a) == []
    b = fn_identity(functools.partial(work, config=Cfg(samples_per_page=2)))
    assert b.config_changes(a) == ["partial argument config.samples_per_page"]


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_a_pydantic_config_is_hashed_by_value_nested_objects_included():
    a = fn_identity(functools.partial(work, config=Model()))
    assert a.skipped == () and "partial argument config.teacher" in a.config
    assert fn_identity(functools.partial(work, config=Model())).config_changes(a) == []
    changed = Model(inner=Cfg(temperature=0.2))
    assert fn_identity(functools.partial(work, config=changed)).config_changes(a) == ["partial argument config.inner"]


def test_attrs_enums_and_namedtuples_are_hashed_by_value():
    pairs = [(AttrsCfg(1), AttrsCfg(2))] if attrs is not None else []
    for same, other in pairs + [
        (Color.RED, Color.BLUE),
        (Pair(1, 2), Pair(1, 3)),
        (Typed(1, "x"), Typed(1, "y")),
    ]:
        a = fn_identity(functools.partial(work, config=same))
        assert a.skipped == (), same
        assert fn_identity(functools.partial(work, config=same)).config_changes(a) == []
        assert fn_identity(functools.partial(work, config=other)).config_changes(a) != [], other


def test_the_class_is_part_of_the_value():
    @dataclasses.dataclass
    class Other:
        temperature: float = 0.7
        samples_per_page: int = 3
        tags: tuple = ("a",)

    a = fn_identity(functools.partial(work, config=Cfg()))
    assert fn_identity(functools.partial(work, config=Other())).config_changes(a) == ["partial argument config"]


def test_a_config_object_holding_state_that_is_not_data_names_that_field():
    @dataclasses.dataclass
    class WithModel:
        k: int
        model: object

    identity = fn_identity(functools.partial(work, config=WithModel(1, object())))
    assert identity.skipped == ("partial argument config.model (object)",)
    assert "partial argument config.k" in identity.config


def test_globals_and_attributes_holding_config_objects_are_hashed():
    class Runner:
        def __init__(self, cfg):
            self.cfg = cfg

        def __call__(self, i):
            return i

    a = fn_identity(Runner(Cfg()))
    assert a.skipped == ()
    assert fn_identity(Runner(Cfg(temperature=1.0))).config_changes(a) == ["self.cfg.temperature"]


def test_a_run_recorded_before_config_objects_were_hashed_still_resumes():
    # what a run recorded before this change: the object skipped, its fields not in config
    before = FnIdentity(name="work", code="c", config={}, skipped=("partial argument config (Cfg)",))
    now = fn_identity(functools.partial(work, config=Cfg()))
    assert now.config_changes(before) == []
    # but a part it did hash that is gone or changed is still a change
    before_other = FnIdentity(name="work", code="c", config={"partial argument x": "00"}, skipped=())
    assert "partial argument x" in now.config_changes(before_other)


def test_attributes_besides_the_declared_fields_are_hashed_too():
    """Trust round 6: ``cfg.extra = ...`` on a dataclass (or a pydantic private attribute) was
    neither hashed nor named as skipped: a changed value resumed silently, mixing both."""

    @dataclasses.dataclass
    class Loose:
        k: int = 1

    def loose(extra):
        cfg = Loose()
        cfg.extra = extra
        return functools.partial(work, config=cfg)

    a = fn_identity(loose(1))
    assert a.skipped == () and "partial argument config.extra" in a.config
    assert fn_identity(loose(1)).config_changes(a) == []
    assert fn_identity(loose(2)).config_changes(a) == ["partial argument config.extra"]
    # a run recorded before such attributes were hashed still resumes
    before = FnIdentity(name=a.name, code=a.code, config={k: v for k, v in a.config.items() if "extra" not in k})
    assert fn_identity(loose(2)).config_changes(before) == []


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_a_pydantic_private_attribute_is_hashed_too():
    class WithPrivate(pydantic.BaseModel):
        t: float = 0.1
        _style: str = pydantic.PrivateAttr(default="short")

    a, b = WithPrivate(), WithPrivate()
    b._style = "long"
    first = fn_identity(functools.partial(work, config=a))
    assert fn_identity(functools.partial(work, config=b)).config_changes(first) == ["partial argument config._style"]
