"""The inputs object (engine/inputs.py): chosen once by kind, then asked the same questions
whatever the kind, so no engine code checks whether inputs are a source."""

from __future__ import annotations

import pickle

from shardwright import sources
from shardwright.engine.inputs import PlainInputs, SourceInputs
from shardwright.engine.planning import check_inputs


def test_check_inputs_chooses_the_kind_once_and_applies_the_transform(tmp_path):
    plain = check_inputs([1, 2, 3, 4], lambda values: values[:2])
    assert isinstance(plain, PlainInputs) and list(plain.values) == [1, 2] and len(plain) == 2
    (tmp_path / "a.txt").write_text("a")
    assert isinstance(check_inputs(sources.files(tmp_path)), SourceInputs)


def test_plain_inputs_answer_once_and_travel_without_what_they_computed():
    inputs = check_inputs(list(range(1000)))
    assert inputs.fingerprint() is inputs.fingerprint(), "pickled once per call"
    assert inputs.prefix_fingerprint()(10) == check_inputs(list(range(10))).fingerprint()
    copy = pickle.loads(pickle.dumps(inputs))
    assert isinstance(copy, PlainInputs) and copy.values == inputs.values
    assert copy.fingerprint() == inputs.fingerprint()


def test_display_name_is_bounded_and_says_when_the_input_is_unknown():
    inputs = check_inputs(["x" * 10_000, "short"])
    assert len(inputs.display_name(0)) < 300
    assert inputs.display_name(1) == "'short'"
    assert inputs.display_name(5) == "?" and inputs.display_name(-1) == "?"
