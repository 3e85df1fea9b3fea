"""reader/resume.py and ResumePoint: positions are pure JSON, checked before a dataset
applies one (trust issue 14, BAD case 5: an edited base must not read items twice)."""

from __future__ import annotations

import pytest

from shardwright.errors import ResumeStateError, UsageError
from shardwright.reader.partition import Layout
from shardwright.reader.plan import length, remaining, stream_plans
from shardwright.reader.resume import (
    EpochStart,
    epoch_start,
    fresh_point,
    items_left,
    parse_combined,
    parse_single,
    single_position,
    worker_resume_point,
)
from shardwright.reader.state import ResumePoint

TOTAL = 200


def position(base, consumed=(0,), layout=Layout()):
    point = ResumePoint(0, None, layout, tuple(consumed)).to_json()
    point["base"] = base
    return {"single": point}


@pytest.mark.parametrize(
    "base, problem",
    [
        ([[0, 200, 0, 200], [0, 200, 0, 200]], "holds 400 items, more than the dataset's 200"),  # all, twice
        ([[0, 200, 0, 120], [0, 200, 100, 200]], "holds 220 items"),
        ([[0, 200, 0, 100], [0, 200, 50, 100]], r"\[0, 200, 0, 100\] and \[0, 200, 50, 100\] overlap"),
        ([[0, 100, 0, 100], [50, 150, 0, 100]], "items 0:100 and 50:150 overlap"),  # both hold items 50..100
    ],
)
def test_a_base_that_reads_items_twice_is_refused(base, problem):
    with pytest.raises(ResumeStateError, match=problem):
        parse_single(position(base), TOTAL)


def test_bases_that_plans_make_are_accepted():
    layout = Layout(world_size=2, num_workers=3, batch_size=4)
    plans = stream_plans(TOTAL, None, layout)
    base = remaining(plans, [5, 0, 17, 3, 30, 1])
    again = remaining(stream_plans(TOTAL, base, Layout(num_workers=2)), [9, 4])
    for b in (base, again, [[0, 200, 0, 100], [0, 200, 100, 200]], [[0, 100, 0, 100], [100, 200, 0, 100]]):
        point = parse_single(position([list(s) for s in b]), TOTAL)
        assert length(list(point.base or ())) == length([tuple(s) for s in b])


def test_resume_errors_are_usage_errors_and_keep_their_old_import():
    from shardwright.reader import ResumeStateError as from_reader
    from shardwright.reader.state import ResumeStateError as from_state

    assert from_reader is ResumeStateError and from_state is ResumeStateError
    assert issubclass(ResumeStateError, UsageError) and issubclass(ResumeStateError, ValueError)


def test_positions_round_trip_through_a_resume():
    layout = Layout(num_workers=2, batch_size=4)
    start = epoch_start(TOTAL, None, layout)
    assert start == EpochStart(None, layout, (0, 0)) and items_left(TOTAL, start) == [100, 100]
    pos = single_position(TOTAL, 3, start, False, batches=5)  # workers alternate: 3 + 2 batches
    point = parse_single(pos, TOTAL)
    assert point.epoch == 3 and point.consumed == (12, 8) and point.rotation == 1
    resumed = epoch_start(TOTAL, point, layout)
    assert resumed.consumed == (12, 8) and items_left(TOTAL, resumed) == [88, 92]
    other = epoch_start(TOTAL, point, Layout(num_workers=3, batch_size=4))  # elastic: the rest cut anew
    assert sum(items_left(TOTAL, other)) == 180 and other.consumed == (0, 0, 0)


def test_combined_positions_are_checked_per_dataset():
    points = [fresh_point(1, Layout()), fresh_point(1, Layout())]
    parsed, generation = parse_combined({"combined": points, "generation": 2}, [10, 20])
    assert [p.epoch for p in parsed] == [1, 1] and generation == 2
    with pytest.raises(ResumeStateError, match="does not match"):
        parse_combined({"combined": points, "generation": 2}, [10])
    with pytest.raises(ResumeStateError, match="different epochs"):
        parse_combined({"combined": [points[0], fresh_point(2, Layout())], "generation": 0}, [10, 20])
    with pytest.raises(ResumeStateError, match="no 'combined' position"):
        parse_combined({"single": points[0]}, [10, 20])


def test_a_worker_state_resumes_its_own_stream_only():
    identity = {"dataset": {"items": 10}, "order": [False, 42, 4]}
    state = {**identity, "epoch": 2, "stream": 1, "streams": 2, "yielded": 3}
    epoch, point = worker_resume_point(state, identity, lambda n: Layout(num_workers=n), 10)
    assert epoch == 2 and point is not None and point.consumed == (0, 3)
    assert worker_resume_point({**state, "stream": None}, identity, Layout, 10) == (2, None)
    for bad, message in (
        ({**state, "dataset": {"items": 11}}, "another dataset"),
        ({**state, "order": [True, 42, 4]}, "other shuffle"),
        ({**state, "epoch": -1}, "not an int from 0"),
        ({**state, "stream": 2}, "damaged"),
    ):
        with pytest.raises(ResumeStateError, match=message):
            worker_resume_point(bad, identity, Layout, 10)
