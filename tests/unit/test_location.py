"""storage.registry.parse_location: the one check of "is this a valid location" (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardwright.engine.planning import check_output_dir
from shardwright.errors import ArgumentTypeError, OutputDirError
from shardwright.storage import Location, open_storage, parse_location, registered_schemes
from shardwright.storage.registry import SCHEME_LABELS, SCHEME_SHAPES


@pytest.mark.parametrize(
    "given, expected",
    [
        ("s3://bucket", Location("s3", "bucket", "", "s3://bucket")),
        ("s3://bucket/", Location("s3", "bucket", "", "s3://bucket")),
        ("s3://bucket/a/b/", Location("s3", "bucket", "a/b", "s3://bucket/a/b")),
        ("S3://bucket/a", Location("s3", "bucket", "a", "s3://bucket/a")),
        ("memory://store", Location("memory", "store", "", "memory://store")),
        ("out/data", Location("file", "", "out/data", "out/data")),
        ("../out/./data", Location("file", "", "../out/./data", "../out/./data")),  # a path, as the OS reads it
        ("file:///tmp/x", Location("file", "", "/tmp/x", "/tmp/x")),
        ("data:v1", Location("file", "", "data:v1", "data:v1")),  # a colon in a local name
        (Path("a/b"), Location("file", "", "a/b", "a/b")),
    ],
)
def test_valid_locations_parse_to_one_normal_form(given, expected):
    location = parse_location(given)
    assert location == expected
    assert location.is_local == (expected.scheme == "file")


@pytest.mark.parametrize(
    "given, message",
    [
        ("", "output_dir is empty"),
        ("  ", "output_dir is empty"),
        ("s3://", "invalid S3 URL 's3://': use s3://bucket/prefix"),
        ("s3:///x", "invalid S3 URL 's3:///x': use s3://bucket/prefix"),
        ("memory://", "invalid memory URL 'memory://': use memory://name"),
        ("s3://b/a//c", "has an empty segment (//) in its key prefix"),
        ("s3://b/./c", "has a '.' segment in its key prefix"),
        ("s3://b/a/..", "has a '..' segment in its key prefix"),
        ("s3://b/a\0c", "contains a NUL byte"),
        ("out\0dir", "contains a NUL byte"),
        ("s3:/bucket/p", "malformed URL 's3:/bucket/p': write s3://bucket/p (two slashes)"),
        ("s3a://bucket/p", "unsupported URL scheme 's3a' in 's3a://bucket/p': write it as s3://bucket/p"),
        ("nope://bucket/p", "unsupported URL scheme 'nope'"),
        ("./x://y", "unsupported URL './x://y'"),
        ("https://user:hunter2@example.com/x", "unsupported URL scheme 'https'"),
    ],
)
def test_invalid_locations_are_one_line_naming_the_fix(given, message):
    with pytest.raises(OutputDirError) as info:
        parse_location(given)
    text = str(info.value)
    assert message in text, text
    assert "\n" not in text and "hunter2" not in text


def test_open_storage_and_the_writer_refuse_what_parse_location_refuses():
    for bad in ("s3://b/a//c", "s3:///x", "memory://a/../b"):
        with pytest.raises(OutputDirError):
            open_storage(bad)
        with pytest.raises(OutputDirError):
            check_output_dir(bad)


def test_writer_wants_the_scheme_as_the_records_spell_it():
    with pytest.raises(OutputDirError, match="write it as 's3://bucket/x'"):
        check_output_dir("S3://bucket/x")
    with pytest.raises(ArgumentTypeError, match="output_dir must be a str or a path"):
        check_output_dir(3)
    assert check_output_dir(Path("out")).path == "out"


def test_message_tables_name_only_known_schemes():
    # A backend's message row without the backend would be dead data.
    assert set(SCHEME_LABELS) | set(SCHEME_SHAPES) <= set(registered_schemes())


def test_a_local_location_has_no_bucket_and_a_remote_one_no_path():
    with pytest.raises(ValueError, match="is not a local path"):
        _ = parse_location("s3://b/p").path
