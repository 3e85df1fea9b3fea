"""Trust round 5: names of inputs and ResumePoint states reach a terminal (`shardwright status`,
messages, logs). A file name, an input or an LLM's reply holding control characters, ANSI
escapes or bidirectional overrides is shown escaped, never acted on by the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardwright.names import display_name, printable
from shardwright.protocol.status import InputInProgress

HOSTILE = [
    "data/\x1b[2J\x1b[31mred",  # clear the screen, recolour
    "data/\x1b]0;owned\x07title",  # set the terminal's title
    "data/ok\rfake line",  # overwrite the line
    "data/\u202etxt.exe",  # right-to-left override ("Trojan Source")
    "data/\x9b31m",  # C1 CSI
    "data/nul\x00",
]


def visible(text: str) -> bool:
    return not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u2066\u200b" for c in text)


@pytest.mark.parametrize("name", HOSTILE)
def test_input_names_are_printable(name):
    for value in (name, Path(name)):
        shown = display_name(value)
        assert visible(shown), repr(shown)
        assert shown.startswith("data/")


@pytest.mark.parametrize("name", HOSTILE)
def test_status_lines_are_printable(name):
    state = json.dumps({"title": name})  # an LLM's reply kept in a ResumePoint
    entry = InputInProgress(3, name, 0, "host", state=state, calls=2)
    line = entry.describe()
    assert visible(line), repr(line)
    assert "2 calls in flight" in line


def test_plain_names_are_unchanged():
    assert printable("données/été 2024.jsonl") == "données/été 2024.jsonl"
    assert display_name("a/b c.txt") == "a/b c.txt"


def test_an_index_naming_a_chunk_with_escapes_is_refused_shown_escaped(tmp_path):
    """A hostile index.json's chunk name reached the terminal raw through verify's report and
    the reader's 'chunk file ... is missing' error."""
    from shardwright import StreamingDataset
    from shardwright.errors import CorruptStateError
    from shardwright.reader.verify import verify
    from support.datasets import write_dataset

    write_dataset(tmp_path / "d", [{"i": i} for i in range(8)], chunk_size=4)
    index = json.loads((tmp_path / "d" / "index.json").read_text())
    index["chunks"][0]["filename"] = "chunk-\x1b[2J\x1b]0;pwn\x07.bin"
    index.pop("digest", None)
    (tmp_path / "d" / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError) as info:
        StreamingDataset(str(tmp_path / "d"))
    assert visible(str(info.value)) and "control characters" in str(info.value)
    report = verify(str(tmp_path / "d"))
    assert not report.ok and visible(str(report))


def test_a_null_digest_is_no_digest():
    from shardwright.format.digest import parse_digest

    assert parse_digest({"digest": None, "chunks": []}) is None  # refused before, like a damaged one
    with pytest.raises(ValueError):
        parse_digest({"digest": 123})
