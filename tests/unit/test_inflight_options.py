"""I/O-bound fns (issue 32): ``concurrency``, ``durable_every``, ``stop_grace`` validated strictly,
fn's kind classified once, and ResumePoint's state checked where fn yields it."""

from __future__ import annotations

import functools

import pytest

import shardwright
from shardwright.engine.io_options import MAX_CONCURRENCY, InflightOptions
from shardwright.engine.options import OptimizeOptions
from shardwright.engine.resume import MAX_RESUME_STATE_BYTES, classify_fn
from shardwright.errors import ArgumentTypeError, UsageError


def plain(x):
    return x


def gen(x, resume=None):
    yield x


async def coro(x):
    return x


async def agen(x, *, resume=None):
    yield x


class AsyncCallable:
    async def __call__(self, x):
        return x


def test_defaults_keep_todays_behaviour():
    options = OptimizeOptions.validate(plain)
    assert options.inflight.concurrency == 1
    assert not options.inflight.in_flight  # the plain loop, exactly as before


@pytest.mark.parametrize("value", [True, 2.0, "4", None])
def test_concurrency_must_be_an_int(value):
    with pytest.raises(ArgumentTypeError, match="concurrency must be an int"):
        OptimizeOptions.validate(plain, concurrency=value)


@pytest.mark.parametrize("value", [0, -1, MAX_CONCURRENCY + 1])
def test_concurrency_is_bounded(value):
    with pytest.raises(UsageError, match=f"concurrency must be between 1 and {MAX_CONCURRENCY}"):
        OptimizeOptions.validate(plain, concurrency=value)


@pytest.mark.parametrize("name", ["durable_every", "stop_grace"])
def test_seconds_options_are_strict_numbers(name):
    with pytest.raises(ArgumentTypeError, match=f"{name} must be a number of seconds"):
        OptimizeOptions.validate(plain, **{name: "5"})
    with pytest.raises(ArgumentTypeError):
        OptimizeOptions.validate(plain, **{name: False})
    with pytest.raises(UsageError, match=f"{name} must be between"):
        OptimizeOptions.validate(plain, **{name: -1})


def test_durable_every_has_a_floor():
    with pytest.raises(UsageError, match="durable_every must be between"):
        OptimizeOptions.validate(plain, durable_every=0)
    assert OptimizeOptions.validate(plain, durable_every=0.5).inflight.durable_every == 0.5


@pytest.mark.parametrize(
    ("fn", "mode", "resume"),
    [
        (plain, "sync", False),
        (gen, "sync", True),
        (coro, "async", False),
        (agen, "asyncgen", True),
        (functools.partial(agen), "asyncgen", True),
        (AsyncCallable(), "async", False),
        (lambda x, **kw: x, "sync", True),
    ],
)
def test_fn_kinds(fn, mode, resume):
    kind = classify_fn(fn)
    assert (kind.mode, kind.accepts_resume) == (mode, resume)


def test_async_and_resumable_fns_run_in_flight():
    assert OptimizeOptions.validate(coro).inflight.in_flight
    assert OptimizeOptions.validate(gen).inflight.in_flight
    assert OptimizeOptions.validate(plain, concurrency=8).inflight.in_flight


def test_resume_without_a_default_is_refused_at_the_start():
    def needs(x, resume):
        yield x

    with pytest.raises(UsageError, match="resume parameter needs a default"):
        OptimizeOptions.validate(needs)


def test_positional_only_resume_is_refused():
    def positional(x, resume=None, /):
        yield x

    with pytest.raises(UsageError, match="must be a keyword parameter"):
        classify_fn(positional)


def test_timeout_needs_the_main_thread_or_an_async_fn():
    with pytest.raises(UsageError, match="timeout= needs fn to run one input at a time"):
        OptimizeOptions.validate(plain, concurrency=4, timeout=1.0)
    assert OptimizeOptions.validate(coro, concurrency=4, timeout=1.0).inflight.concurrency == 4


def test_inflight_options_pickle():
    import pickle

    options = OptimizeOptions.validate(agen, concurrency=32)
    assert pickle.loads(pickle.dumps(options.inflight)) == options.inflight
    assert isinstance(options.inflight, InflightOptions)


def test_resume_point_keeps_a_copy_of_plain_json():
    state = {"page": 17, "done": [1, 2], "note": "é"}
    point = shardwright.ResumePoint(state)
    state["page"] = 18
    assert point.state == {"page": 17, "done": [1, 2], "note": "é"}
    assert point == shardwright.ResumePoint({"page": 17, "done": [1, 2], "note": "é"})
    assert repr(point).startswith("ResumePoint(")


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"page": object()}, "state must be JSON"),
        ({"x": float("nan")}, "state must be JSON"),
        ((1, 2), "reads back equal"),
        ({1: "a"}, "reads back equal"),
        ({"blob": "x" * MAX_RESUME_STATE_BYTES}, "more than 4,096"),
    ],
)
def test_resume_point_state_is_validated(state, match):
    with pytest.raises(UsageError, match=match):
        shardwright.ResumePoint(state)


def test_resume_point_at_the_limit_is_accepted():
    text = "x" * (MAX_RESUME_STATE_BYTES - 2)  # '"' + text + '"'
    assert shardwright.ResumePoint(text).state == text
