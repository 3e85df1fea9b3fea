"""Issue 33: leaves of hostile datasets stop at shardwright's limits (format.limits: decoded
bytes and pixels, set by set_limits or the environment), and a pickle naming a class of the
script that wrote it is one clear line with allow_pickle=True."""

from __future__ import annotations

import gzip
import io
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest

from shardwright.errors import CorruptStateError, UnsupportedFormatError, UsageError
from shardwright.format import limits
from shardwright.format.serializers import leaf_decoder


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch):
    limits.reset_limits()
    monkeypatch.delenv(limits.DECODED_BYTES_ENV, raising=False)
    monkeypatch.delenv(limits.IMAGE_PIXELS_ENV, raising=False)
    yield
    limits.reset_limits()


def test_limits_default_to_1_gib_and_pillows_pixels_and_are_overridable(monkeypatch):
    assert (limits.max_decoded_bytes(), limits.max_image_pixels()) == (1 << 30, 89_478_485)
    monkeypatch.setenv(limits.DECODED_BYTES_ENV, "16GiB")
    monkeypatch.setenv(limits.IMAGE_PIXELS_ENV, "1000")
    assert (limits.max_decoded_bytes(), limits.max_image_pixels()) == (16 << 30, 1000)
    limits.set_limits(max_decoded_bytes=5)  # the process's own choice wins over the environment
    assert (limits.max_decoded_bytes(), limits.max_image_pixels()) == (5, 1000)
    with pytest.raises(UsageError, match="pass a positive int"):
        limits.set_limits(max_image_pixels=0)
    monkeypatch.setenv(limits.IMAGE_PIXELS_ENV, "many")
    with pytest.raises(UsageError, match="SHARDWRIGHT_MAX_IMAGE_PIXELS='many' is not a positive number"):
        limits.max_image_pixels()


def test_a_tiff_over_the_pixel_limit_is_refused_before_its_pixels_are_decoded(monkeypatch):
    tifffile = pytest.importorskip("tifffile")
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, np.zeros((64, 64, 3), dtype=np.uint8), compression="zlib")
    decode = leaf_decoder("tifffile", False)
    assert decode(memoryview(buffer.getvalue())).shape == (64, 64, 3)
    monkeypatch.setenv(limits.IMAGE_PIXELS_ENV, "1000")  # 4,096 pixels: over twice the limit
    with pytest.raises(CorruptStateError, match=r"tifffile leaf of shape \(64, 64, 3\) has 4,096 pixels"):
        decode(memoryview(buffer.getvalue()))
    monkeypatch.setenv(limits.IMAGE_PIXELS_ENV, "3000")  # over the limit, under twice: a warning, as Pillow
    with pytest.warns(UserWarning, match="more than shardwright's limit of 3,000"):
        decode(memoryview(buffer.getvalue()))


def test_a_gzipped_nifti_stops_at_the_decoded_bytes_limit():
    nib = pytest.importorskip("nibabel")
    volume = nib.Nifti1Image(np.zeros((64, 64, 64), dtype=np.float32), np.eye(4)).to_bytes()  # 1 MiB
    blob = gzip.compress(volume)
    decode = leaf_decoder("nifti:nii.gz", False)
    assert decode(memoryview(blob)).shape == (64, 64, 64)
    limits.set_limits(max_decoded_bytes=256 << 10)
    with pytest.raises(CorruptStateError, match="a nifti leaf decodes to more than 262,144 bytes"):
        decode(memoryview(blob))


def test_allow_pickle_with_a_class_of_the_writers_script_is_one_clear_line(tmp_path):
    # the class exists only in the script that pickled it (its __main__)
    script = tmp_path / "writer.py"
    script.write_text(
        "import pickle, sys\nclass Point:\n    def __init__(self):\n        self.x = 1\n"
        "sys.stdout.buffer.write(pickle.dumps(Point()))\n"
    )
    blob = subprocess.run([sys.executable, str(script)], check=True, capture_output=True).stdout
    decode = leaf_decoder("pickle", True)
    with pytest.raises(UnsupportedFormatError) as info:
        decode(memoryview(blob))
    message = str(info.value)
    assert "__main__.Point" in message and "importable module" in message and "\n" not in message
    assert decode(memoryview(pickle.dumps({"plain": [1, 2]}))) == {"plain": [1, 2]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnsupportedFormatError, match="refers to __main__.Point"):
            leaf_decoder("pickle", False)(memoryview(blob))  # unchanged: refused as code, not data
