"""Three commit records of shard 0 written as a run writes them (with their checksum), and a
small run manifest, for the tests that damage, strip or edit them on disk (trust rounds 8-10)."""

from __future__ import annotations

import json

from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.protocol.layout import record_key
from shardwright.protocol.manifest import Manifest, OutputSettings, new_manifest
from shardwright.protocol.records import CommitRecord, write_records
from shardwright.storage import Storage, open_storage

EPOCH = 7


def small_manifest() -> Manifest:
    """A new run's manifest: 4 inputs in 2 shards, checkpoints on (sealed, as a new run is)."""
    return new_manifest(
        generation=1,
        mode="create",
        num_inputs=4,
        num_shards=2,
        inputs=InputsFingerprint.of([1, 2, 3, 4]).to_json(),
        settings=OutputSettings(1, None, None, 2),
        use_checkpoint=True,
        fn_name="f",
    )


def written_records(tmp_path) -> tuple[Storage, str]:
    """A local output holding the records of one commit round, and that round's record key."""
    storage = open_storage(str(tmp_path / "out"))
    records = [
        CommitRecord(0, seq, None, 0, 2 * seq, 2 * seq + 2, 0, False, (), "run", EPOCH, None if seq == 0 else EPOCH)
        for seq in range(3)
    ]
    write_records(storage, records)
    return storage, record_key(0, 0, EPOCH)


def strip_checksum(storage: Storage, key: str, old: str = "", new: str = "") -> None:
    """Rewrite a record file without its checksum (as a version before checksums wrote it),
    replacing ``old`` with ``new`` in its text: a hand edit that drops the seal."""
    body = json.loads(storage.read_bytes(key))
    text = json.dumps({"records": body["records"]}, separators=(",", ":")).replace(old, new)
    storage.write_bytes(key, text.encode())


def record_rounds(storage: Storage) -> list[tuple[str, str, int, int]]:
    """Every commit round of an output's records as (key, where errors name it, line, shard): a
    record file (line 0), or a line of a record log (protocol.record_log), in the order written."""
    from shardwright.protocol.layout import SHARDS_PREFIX, is_record_log_key, parse_record_key

    rounds = []
    for key in sorted(storage.list(SHARDS_PREFIX)):
        parsed = parse_record_key(key)
        if parsed is not None:
            rounds.append((key, key, 0, parsed[0]))
        elif is_record_log_key(key):
            lines = storage.read_bytes(key).split(b"\n")[:-1]
            for n, line in enumerate(lines, 1):
                rounds.append((key, f"{key} (line {n})", n, json.loads(line)["records"][0]["shard"]))
    return rounds


def replace_round(storage: Storage, round_: tuple, content: bytes | None) -> None:
    """Put ``content`` where one commit round of :func:`record_rounds` is (a hand edit, damage);
    None deletes the round (its file, or its line with its newline)."""
    key, _, line = round_[:3]
    if line == 0:
        if content is None:
            storage.delete(key)
        else:
            storage.write_bytes(key, content)
        return
    lines = storage.read_bytes(key).split(b"\n")
    if content is None:
        del lines[line - 1]
    else:
        lines[line - 1] = content
    storage.write_bytes(key, b"\n".join(lines))
