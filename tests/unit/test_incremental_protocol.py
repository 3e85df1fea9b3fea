"""mode="incremental" on the memory backend, driven in process through the protocol's own
steps (decide, the manifest, the unit table, commit rounds, publishing with its selection):
a crash at every write of an incremental run, then reruns until the call finishes, leaves
every input in the dataset exactly once, old items first and unchanged, new ones in input
order. The identity files themselves: compact, refused when damaged."""

from __future__ import annotations

import uuid

import pytest

from shardwright.errors import CorruptStateError
from shardwright.format import ItemEncoder, chunk_item, chunk_num_items, decode_item, parse_index
from shardwright.protocol.claim import claim_format, read_format
from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round
from shardwright.protocol.decide import Request
from shardwright.protocol.fn_identity import FnIdentity
from shardwright.protocol.identity import IdentityTable, values_hashes
from shardwright.protocol.layout import INDEX_KEY, INPUTS_PREFIX, MANIFEST_KEY, units_key
from shardwright.protocol.manifest import OutputSettings
from shardwright.protocol.publish import publish_if_complete
from shardwright.protocol.recorded import read_recorded, subtract, to_ranges
from shardwright.protocol.records import load_progress
from shardwright.storage import MemoryStorage, open_storage

SETTINGS = OutputSettings(chunk_size=1, chunk_bytes=None, compression=None, num_shards=3)


class Crash(Exception):
    """A simulated power cut at one write."""


@pytest.fixture
def storage():
    name = f"incr-{uuid.uuid4().hex[:8]}"
    yield open_storage(f"memory://{name}")
    MemoryStorage.drop(name)


def request(values: list, mode: str | None) -> Request:
    from shardwright.engine.inputs import run_inputs

    inputs = run_inputs(values)
    return Request(
        mode=mode,
        inputs=inputs.fingerprint(),
        settings=SETTINGS,
        fn_name="m.f",
        use_checkpoint=True,
        identities=inputs.identities() if mode == "incremental" else None,
        prefix_fingerprint=inputs.prefix_fingerprint() if mode == "incremental" else None,
    )


def drive(storage, values: list, mode: str | None) -> None:
    """One optimize() call, in process: each input gives one item {"v": value}, one chunk each."""
    from shardwright.engine.inputs import record_identities, run_inputs
    from shardwright.engine.opening import open_run

    opened = open_run(storage, request(values, mode))
    if opened is None:
        return
    manifest, resumed = opened
    inputs = run_inputs(values)
    record_identities(storage, manifest, inputs, created=not resumed)
    known = read_format(storage, manifest.run_id)
    if known is None:
        encoder = ItemEncoder()
        encoder.encode({"v": values[0]}, 0)
        claim_format(storage, manifest.run_id, list(encoder.data_format or []), encoder.data_spec, 0)
    else:
        encoder = ItemEncoder(known["data_format"], known["data_spec"])
    settings = RoundSettings(manifest.run_id, manifest.generation, None, True)
    progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id, repair=True)
    for p in progress.values():
        todo, _ids = inputs.shard(manifest, p.next_input, p.end)
        for k, value in enumerate(todo):
            position = p.next_input + k
            item = encoder.encode({"v": value}, position)
            job = PendingChunk(p.shard, p.next_seq + k, [item], position, position + 1, 0, position + 1 == p.end)
            commit_round(storage, [job], settings)
            storage.barrier()
    publish_if_complete(storage, manifest, {}, FnIdentity(name="m.f"))


def dataset(storage) -> list:
    chunks, config = parse_index(storage.read_bytes(INDEX_KEY), "index.json")
    out = []
    for chunk in chunks:
        data = storage.read_bytes(chunk.filename)
        out += [
            decode_item(chunk_item(data, j), config.data_format, config.data_spec)["v"]
            for j in range(chunk_num_items(data))
        ]
    return out


OLD = ["a", "b", "c", "d", "e"]
NEW = ["a", "b", "c", "d", "e", "f", "b", "g"]  # f, the second b, g are new


def test_the_incremental_call_appends_only_new_inputs_in_order(storage):
    drive(storage, OLD, None)
    drive(storage, NEW, "incremental")
    assert dataset(storage) == [*OLD, "f", "b", "g"]
    drive(storage, NEW, "incremental")  # nothing new: a no-op
    assert dataset(storage) == [*OLD, "f", "b", "g"]


WRITES = ("write_bytes", "create_exclusive", "replace_if_version", "delete", "delete_prefix", "barrier")


def _crash_points() -> int:
    """How many writes the incremental call makes (a dry run)."""
    name = f"count-{uuid.uuid4().hex[:8]}"
    s = open_storage(f"memory://{name}")
    drive(s, OLD, None)
    seen: list[str] = []
    s.fail_when(lambda op, key: seen.append(op) if op in WRITES else None)
    drive(s, NEW, "incremental")
    MemoryStorage.drop(name)
    return len(seen)


@pytest.mark.parametrize("crash_at", range(_crash_points()))
def test_a_crash_at_any_write_of_an_incremental_run_loses_and_repeats_nothing(storage, crash_at):
    drive(storage, OLD, None)
    count = {"writes": 0}

    def power_cut(op, key):
        if op in WRITES:
            count["writes"] += 1
            if count["writes"] == crash_at + 1:
                return Crash(f"power cut at write {crash_at}: {op} {key}")
        return None

    storage.fail_when(power_cut)
    try:
        drive(storage, NEW, "incremental")
    except Crash:
        pass
    else:  # only a best-effort write (the publish lease's release) may swallow the cut
        assert count["writes"] > crash_at
    storage.clear_faults()
    storage.crash()  # what was not made durable is lost
    for lease in storage.list(".shardwright/leases/"):
        storage.delete(lease)
    drive(storage, NEW, "incremental")  # the rerun: resumes, finishes publishing, or is a no-op
    assert dataset(storage) == [*OLD, "f", "b", "g"]
    drive(storage, NEW, "incremental")
    assert dataset(storage) == [*OLD, "f", "b", "g"]
    assert not storage.exists(MANIFEST_KEY)


def test_every_run_records_its_inputs_compactly(storage):
    values = list(range(1000))
    drive(storage, values, None)
    assert len(storage.read_bytes(units_key(0))) == 24 + 16 * 1000
    recorded = read_recorded(storage, 0)
    assert recorded.generations == [0] and recorded.selections == [[[0, 1000]]]
    drive(storage, [*values, 5000], "append")  # append records too (all of its inputs)
    assert read_recorded(storage, 1).generations == [0, 1]


def test_damaged_identity_files_are_refused_naming_the_file(storage):
    drive(storage, OLD, None)
    storage.write_bytes(units_key(0), b"SWUNITS1" + b"\0" * 5)
    with pytest.raises(CorruptStateError, match=r"inputs/00000000\.units"):
        drive(storage, NEW, "incremental")
    storage.write_bytes(units_key(0), IdentityTable.of_values(OLD).to_bytes())
    storage.write_bytes(INPUTS_PREFIX + "00000000.json", b'{"selected": [[0, 99]]}')
    with pytest.raises(CorruptStateError, match=r"inputs/00000000\.json"):
        drive(storage, NEW, "incremental")


def test_range_helpers():
    assert to_ranges([1, 2, 3, 7, 8, 10]) == [[1, 4], [7, 9], [10, 11]]
    assert subtract([[0, 10], [20, 25]], [0, 4, 9, 22, 30]) == [[1, 4], [5, 9], [20, 22], [23, 25]]


@pytest.mark.parametrize(
    "inputs",
    [
        range(0),
        range(5),
        range(3, 100, 7),
        range(10, -10, -3),
        range(2**63 - 5, 2**63 + 5),
        range(-(2**63) - 2, -(2**63) + 3),
    ],
)
def test_a_range_has_the_identities_of_its_values(inputs):
    """range(N) takes a vectorised path (issue 19): the same hashes as its values one by one,
    and ranges reaching past int64 take the general path."""
    fast, plain = values_hashes(inputs), values_hashes(list(inputs))
    assert fast.dtype == plain.dtype and fast.tolist() == plain.tolist() and len(fast) == len(inputs)


# computed by the code before issue 19's whole-list fast paths: they must not change
GOLDEN_INTS_DIGEST = "2698b320d5c5b589"
GOLDEN_INT_IDENTITIES = [13584602724991562817, 10290511070791673501, 6244629451894758760]


class _Str(str):
    pass


@pytest.mark.parametrize(
    "values",
    [
        list(range(70_000)),  # one kind, more than one identity block
        [f"item-{i}" for i in range(70_000)],
        [2**64 + i for i in range(10)] + list(range(70_000)),  # ints past int64: the general path
        [1, "a", b"x", None, 2.5, True, -5, 2**70, (1, "a"), {3, 1}] * 300,
        [True, False] * 200,  # bool is not int: never the int path
        [_Str("a/b"), "c/d", "e"] * 100,  # a str subclass is not str
        ["/no/such/file", "relative/path", "x"] * 300,
        [],
    ],
    ids=["ints", "strs", "big-ints", "mixed", "bools", "str-subclass", "paths", "empty"],
)
def test_the_whole_list_fast_paths_hash_like_the_blocks(values, tmp_path):
    """A list's value types are looked at once (issue 19) and decide every block's path; a
    tuple takes the per-block checks. Fingerprints, file stats and identities must be the
    same bytes either way: a resume compares them with those of the run it resumes."""
    from shardwright.protocol.fingerprint import InputFiles, InputsFingerprint, value_types

    files = [str(tmp_path / f"f{i}") for i in range(3)]
    for i, path in enumerate(files):
        open(path, "w").write("x" * i)
    values = values + files  # real files: their stats are hashed
    as_list, as_tuple = values, tuple(values)
    assert value_types(as_tuple) is None and value_types(as_list) == frozenset(map(type, values))
    for given in (None, value_types(as_list)):
        assert InputsFingerprint.of(as_list, types=given) == InputsFingerprint.of(as_tuple)
        assert InputFiles.of(as_list, types=given) == InputFiles.of(as_tuple)
        assert values_hashes(as_list, types=given).tolist() == values_hashes(as_tuple).tolist()
    assert InputFiles.of(as_list) is not None


def test_the_fingerprint_of_a_list_of_ints_is_fixed():
    """The bytes a manifest records: a change of algorithm would refuse every resume of a run
    written before it ("fingerprinted differently")."""
    from shardwright.protocol.fingerprint import InputsFingerprint

    fp = InputsFingerprint.of(list(range(1000)))
    assert fp.digest() == GOLDEN_INTS_DIGEST
    assert fp == InputsFingerprint.of(range(1000)) == InputsFingerprint.of(tuple(range(1000)))
    assert values_hashes(list(range(3))).tolist() == GOLDEN_INT_IDENTITIES


@pytest.mark.parametrize("sources", [False, True])
def test_identity_table_file_layout_is_fixed_and_round_trips(sources):
    """The unit table's file: magic, count, kind, then little-endian uint64 columns, written
    from the arrays as parts (no copy) and read back to equal arrays."""
    import numpy as np

    from shardwright.protocol.identity import IdentityTable

    keys, versions = np.array([1, 2**63 + 5, 7], np.uint64), np.array([0, 3, 9], np.uint64)
    extra = [np.array([0, 4, 0], np.uint64), np.array([1, 2, 3], np.uint64)] if sources else []
    table = IdentityTable(keys, versions, *extra)
    data = table.to_bytes()
    expected = (
        data[:8]
        + np.array([3, int(sources)], "<u8").tobytes()
        + b"".join(c.astype("<u8").tobytes() for c in [keys, versions, *extra])
    )
    assert data == expected == b"".join(bytes(part) for part in table.to_parts())
    back = IdentityTable.from_bytes(data, "test")
    assert all((a == b).all() for a, b in zip([back.keys, back.versions], [keys, versions]))
    assert (back.rows is not None) == sources


def test_another_call_on_a_finished_dataset_gets_litdatas_hint(storage):
    from shardwright.errors import DatasetExistsError

    drive(storage, OLD, None)
    # code written for litdata matches its "HINT: ..." words (litdata's own test_optimize_append_overwrite)
    with pytest.raises(DatasetExistsError, match="HINT: If you want to append/overwrite to the existing dataset"):
        drive(storage, ["x", "y"], None)
