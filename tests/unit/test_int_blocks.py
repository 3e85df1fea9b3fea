"""The fast paths over a call's inputs (issue 36: the serial CPU before the pool starts): a
list or range of ints fingerprinted from one int64 array without the pickler, identities from
the same array, str and bytes identities in C-level loops, a list's types counted. Fingerprints
and unit tables are on disk: a run begun before these paths must resume under them, and be
refused when its inputs change, so every result must be the general path's bytes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from shardwright.engine.inputs import PlainInputs
from shardwright.protocol import fingerprint as fingerprint_module
from shardwright.protocol import int_blocks
from shardwright.protocol.fingerprint import InputsFingerprint, StablePickler, canonical, value_types
from shardwright.protocol.identity import value_hash, values_hashes
from shardwright.protocol.int_blocks import int64_values, uniform_blocks


def golden_shapes() -> dict[str, list[int]]:
    """Deterministic ints of every pickle encoding, runs of one kind and blocks mixing them."""
    return {
        "small": list(range(-300, 70_000)),
        "int32-edges": [v for k in range(3000) for v in (2**31 - 1500 + k, -(2**31) - 1500 + k)],
        "long-lengths": [s * (2**b + k) for b in (33, 41, 49, 57, 62) for s in (1, -1) for k in range(600)],
        "scattered": [(i * 2654435761) % 2**40 - 2**39 for i in range(5000)],
        "extremes": [-(2**63), 2**63 - 1, 0, -1] * 300,
    }


# (fingerprint digest, blake2b-8 of the identity column) computed by main's code before the
# fast paths (commit 45c601f): a manifest or unit table it wrote must still match
GOLDEN = {
    "small": ("ffdef127cfe4415a", "17df6706b46afc03"),
    "int32-edges": ("17dc462c540e0d1e", "939acca2b8477829"),
    "long-lengths": ("52603bece28030f5", "9805e5d443fb963b"),
    "scattered": ("2f3d538f12dfaada", "03793cb5450d708d"),
    "extremes": ("07703bfe191b88b8", "51cbb532829786ff"),
}


def _column_digest(hashes: np.ndarray) -> str:
    return hashlib.blake2b(hashes.astype("<u8").tobytes(), digest_size=8).hexdigest()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fingerprints_and_identities_of_ints_are_those_main_recorded(name):
    values = golden_shapes()[name]
    assert InputsFingerprint.of(values).digest() == GOLDEN[name][0]
    assert _column_digest(values_hashes(values)) == GOLDEN[name][1]


@pytest.mark.parametrize("name", sorted(GOLDEN))
@pytest.mark.parametrize("block_size", [2, 3, 256, 1000])
def test_every_block_built_from_the_array_is_the_picklers_bytes(name, block_size):
    """Every row, not only the first of a kind that the fingerprint checks at run time."""
    values = golden_shapes()[name]
    pickler, seen = StablePickler(), 0
    for numbers, rows in uniform_blocks(np.array(values, dtype=np.int64), block_size):
        for number, row in zip(numbers.tolist(), rows):
            block = values[number * block_size : (number + 1) * block_size]
            assert row.tobytes() == pickler.dumps(block), (number, block[:3])
            seen += 1
    if name == "small" or (name == "long-lengths" and block_size <= 256):  # runs of one kind
        assert seen >= len(values) // block_size // 2


class _Int(int):
    pass


def _reference_fingerprint(values: list, block_size: int = 256) -> InputsFingerprint:
    """The fingerprint as defined: the blake2b-8 of each block's memo-less protocol-4 pickle
    (sets made sorted tuples)."""
    pickler = StablePickler()
    hashes = [
        hashlib.blake2b(pickler.dumps([canonical(v) for v in values[s : s + block_size]]), digest_size=8).hexdigest()
        for s in range(0, len(values), block_size)
    ]
    return InputsFingerprint(len(values), block_size, "".join(hashes))


SHAPES = {
    "range-list": list(range(200_001)),
    "negatives": list(range(-70_000, 1_000, 3)),
    "huge": [2**64 + i for i in range(300)] + list(range(1_000)),  # past int64: the general path
    "huge-at-end": list(range(1_000)) + [-(2**63) - 1],
    "bools": [True, False] * 600,  # bool is not int here: pickled as bools, hashed as pickles
    "ints-and-a-bool": list(range(600)) + [True] + list(range(600)),
    "int-subclass": [_Int(i) for i in range(300)] + list(range(600)),
    "numpy-scalars": [np.int64(i) for i in range(300)] + [np.float32(1.5), np.uint8(3)],
    "ints-and-numpy": list(range(600)) + [np.int64(5)] + list(range(600)),
    "mixed": [1, "a", b"x", None, 2.5, True, -5, 2**70, (1, "a"), {3, 1}] * 100,
    "strs": [f"item-é-{i}-\N{SNOWMAN}" for i in range(3_000)],
    "surrogates": ["\ud800x", "a", ""] * 300,
    "bytes": [bytes([i % 256]) * (i % 7) for i in range(3_000)],
    "tuples": [(i, str(i)) for i in range(1_000)],
    "dicts": [{"i": i, "s": {i, i + 1}} for i in range(700)],
    "floats": [i / 3 for i in range(700)],
    "empty": [],
    "one": [7],
    "one-past-a-block": list(range(257)),
    **golden_shapes(),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_fast_paths_give_the_general_paths_bytes(name):
    values = SHAPES[name]
    expected = _reference_fingerprint(values)
    expected_ids = [value_hash(v) for v in values]
    types = value_types(values)
    assert types == frozenset(map(type, values))
    assert InputsFingerprint.of(values) == expected
    assert InputsFingerprint.of(values, types=types, ints=int64_values(values, types)) == expected
    assert InputsFingerprint.of(tuple(values)) == expected  # no whole-list path at all
    assert values_hashes(values).tolist() == expected_ids
    assert values_hashes(tuple(values)).tolist() == expected_ids
    inputs = PlainInputs(values)  # the engine's: one array shared by both, in either order
    assert inputs.identities().keys.tolist() == expected_ids and inputs.fingerprint() == expected
    inputs = PlainInputs(values)
    assert inputs.fingerprint() == expected and inputs.identities().keys.tolist() == expected_ids


@pytest.mark.parametrize("inputs", [range(0), range(5), range(-700, 70_000, 3), range(2**63 - 600, 2**63 + 5)])
def test_a_range_is_fingerprinted_like_its_list(inputs):
    assert InputsFingerprint.of(inputs) == _reference_fingerprint(list(inputs))


def test_ints_are_fingerprinted_without_pickling_each_block(monkeypatch):
    """The point of the path: 100k ints are 391 blocks, pickled one each before; now the
    pickler only checks one block of each kind of encoding (and the last, partial block)."""
    calls = []
    dumps = StablePickler.dumps

    def counted(self, value):
        calls.append(len(value))
        return dumps(self, value)

    monkeypatch.setattr(StablePickler, "dumps", counted)
    values = list(range(100_000))
    assert InputsFingerprint.of(values) == _reference_fingerprint(values)
    calls.clear()
    InputsFingerprint.of(values)
    assert len(calls) <= 5, calls  # K, M and J blocks checked; the block mixing M and J; the tail


@pytest.mark.parametrize("wrong_batch", [0, 1, 2])
def test_a_block_the_pickler_would_write_otherwise_turns_the_fast_path_off(monkeypatch, wrong_batch):
    """If a Python's pickler ever wrote ints otherwise, the check against it sends every block
    through the pickler, those of batches already hashed too: the fingerprint stays the
    pickles' own."""
    rows_of = int_blocks.uniform_blocks

    def wrong(values, block_size):
        for batch, (numbers, rows) in enumerate(rows_of(values, block_size)):
            if batch == wrong_batch:
                rows[:, 1] = 3  # protocol 3 in the header
            yield numbers, rows

    monkeypatch.setattr(fingerprint_module, "uniform_blocks", wrong)
    values = list(range(100_000))
    assert InputsFingerprint.of(values) == _reference_fingerprint(values)


def test_blocks_are_built_a_bounded_batch_at_a_time():
    values = np.arange(3 * int_blocks.MAX_ROWS * 256 + 100, dtype=np.int64) + 2**40  # one kind: LONG1 of 6
    batches = [(numbers, rows) for numbers, rows in uniform_blocks(values, 256)]
    assert [len(numbers) for numbers, _ in batches] == [int_blocks.MAX_ROWS] * 3
    assert all(rows.shape == (int_blocks.MAX_ROWS, 11 + 256 * 8 + 4) for _, rows in batches)
    pickler = StablePickler()
    last = batches[-1][0][-1]
    assert batches[-1][1][-1].tobytes() == pickler.dumps(values[last * 256 : (last + 1) * 256].tolist())


def test_a_list_of_one_type_is_counted_and_a_mixed_one_collected():
    assert value_types([3] * 100) == frozenset((int,))
    assert value_types([3] * 100 + ["a"]) == frozenset((int, str))  # the odd one after the first 64
    assert value_types(["a", 3] * 100) == frozenset((int, str))
    assert value_types([True] + [3] * 100) == frozenset((int, bool))
    assert value_types([]) == frozenset()
    assert value_types(range(4)) == frozenset((int,)) and value_types((1, 2)) is None


def test_fingerprinting_ints_imports_nothing_more():
    """Run in a fresh interpreter: a first use of numpy.unique imports numpy.ma (11 ms of a
    200k-input call's serial CPU, more than the fast path saves)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from shardwright.engine.inputs import PlainInputs\n"
        "before = set(sys.modules)\n"
        "inputs = PlainInputs(list(range(-300, 70_000)) + [2**40 + i for i in range(600)])\n"
        "inputs.check_before_writing(); inputs.identities()\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
