"""Every litdata 0.2.76 leaf format, both ways, against litdata's own serializers (in process).

For each value: our bytes and format name equal what litdata's serializer table produces for
the equivalent value; our decoder reads litdata's bytes; litdata's decoder reads ours (where
its decoder loads here: not for jpeg/image, which need torchvision, nor audio/video, which
need torchcodec).
"""

from __future__ import annotations

import io
import pickle
import warnings

import numpy as np
import pytest

from shardwright import format as fmt
from shardwright.errors import UnsupportedFormatError
from shardwright.format.serializers import FAMILIES, encode_first, leaf_decoder

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")
PIL = pytest.importorskip("PIL.Image")
serializers = pytest.importorskip("litdata.streaming.serializers")


def lit_encode(value):
    """(bytes, name) as litdata's writer picks them: the first serializer that takes the value."""
    for key, serializer in serializers._SERIALIZERS.items():
        if serializer.can_serialize(value):
            data, name = serializer.serialize(value)
            return bytes(data), name or key
    raise AssertionError("no litdata serializer")


def lit_decode(name, data):
    table = serializers._get_serializers(None)
    base, _, sub = name.partition(":")
    serializer = table[sub if sub in table else base]
    serializer.setup(name)
    return serializer.deserialize(data)


def ours_decode(name, data, allow_pickle=False):
    return leaf_decoder(name, allow_pickle)(memoryview(data))


def both(ours_value, lit_value, name):
    ours_bytes, ours_name = encode_first(ours_value)
    lit_bytes, lit_name = lit_encode(lit_value)
    assert ours_name == name and lit_name == name
    assert ours_bytes == lit_bytes
    return ours_bytes


def equal(a, b):
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if PIL and isinstance(b, PIL.Image):
        return a.mode == b.mode and a.size == b.size and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def test_the_table_has_litdatas_24_names():
    assert FAMILIES == tuple(serializers._SERIALIZERS)


@pytest.mark.parametrize(
    "value, name",
    [("héllo", "str"), (True, "bool"), (False, "bool"), (-(2**63), "int"), (2.5, "float"), (b"\x00raw", "bytes")],
)
def test_scalars(value, name):
    data = both(value, value, name)
    assert equal(ours_decode(name, data), value) and equal(lit_decode(name, data), value)


NUMPY_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32"]
NUMPY_DTYPES += ["float64", "complex64", "complex128", "bool"]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 1, 3)])
def test_numpy_every_dtype(dtype, shape):
    value = (
        (np.arange(np.prod(shape)) % 2 if dtype == "bool" else np.arange(np.prod(shape))).astype(dtype).reshape(shape)
    )
    name = "numpy" if len(shape) > 1 else f"no_header_numpy:{NUMPY_DTYPES.index(dtype)}"
    data = both(value, value, name)
    assert equal(ours_decode(name, data), value) and equal(lit_decode(name, data), value)


TORCH_DTYPES = ["float32", "float64", "float16", "complex64", "complex128", "uint8", "int8", "int16", "int32"]
TORCH_DTYPES += ["int64", "bool", "uint16"]


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("shape", [(4,), (2, 2), ()])
def test_tensor_every_dtype(dtype, shape):
    value = torch.arange(max(1, int(np.prod(shape)))).reshape(shape).to(getattr(torch, dtype))
    data = both(value, value, "tensor" if len(shape) != 1 else f"no_header_tensor:{lit_encode(value)[1].split(':')[1]}")
    name = encode_first(value)[1]
    assert equal(ours_decode(name, data), value) and equal(lit_decode(name, data), value)


def test_bfloat16_tensor_is_written_and_read():
    # litdata's writer crashes on bfloat16 (numpy has none); its reader reads what we write.
    value = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    data, name = encode_first(value)
    assert name == "tensor"
    assert equal(ours_decode(name, data), value) and equal(lit_decode(name, data), value)


def test_tensor_wrapper():
    value = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    both(fmt.Tensor(array=value), ld.Tensor(array=value), "tensor")
    one_d = np.arange(4, dtype=np.int64)
    data = both(fmt.Tensor(array=one_d), ld.Tensor(array=one_d), "no_header_tensor:18")
    assert equal(ours_decode("no_header_tensor:18", data), torch.arange(4))


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "1", "I;16", "F", "P", "CMYK"])
def test_pil_images_every_mode(mode):
    image = PIL.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).convert(mode)
    data = both(image, image, "pil")
    assert equal(ours_decode("pil", data), image) and equal(lit_decode("pil", data), image)


def test_pil_wrapper_converts_mode_and_arrays():
    array = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    both(fmt.Pil(array=array, mode="L"), ld.Pil(array=array, mode="L"), "pil")
    float_array = np.linspace(0, 1, 48, dtype=np.float32).reshape(4, 4, 3)
    both(fmt.Pil(array=float_array), ld.Pil(array=float_array), "pil")


def jpeg_file(tmp_path, quality=90):
    path = tmp_path / "x.jpg"
    PIL.fromarray(np.random.default_rng(0).integers(0, 256, (16, 24, 3), np.uint8)).save(path, quality=quality)
    return path


def pixels(data):
    with PIL.open(io.BytesIO(data)) as image:
        return torch.from_numpy(np.asarray(image.convert("RGB"))).permute(2, 0, 1)


def test_jpeg_file_keeps_its_bytes(tmp_path):
    path = jpeg_file(tmp_path)
    with PIL.open(path) as ours_image, PIL.open(path) as lit_image:
        data = both(ours_image, lit_image, "jpeg")
    assert data == path.read_bytes()
    decoded = ours_decode("jpeg", data)
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, 16, 24) and torch.equal(decoded, pixels(data))


@pytest.mark.parametrize("kwargs", [{}, {"quality": 70}, {"max_quality": 80}, {"max_quality": 95}])
def test_jpeg_wrapper_qualities(tmp_path, kwargs):
    path = jpeg_file(tmp_path, quality=90)
    array = np.random.default_rng(1).integers(0, 256, (8, 8, 3), np.uint8)
    # litdata's table gives a wrapper whose path ends in an image extension to "image" first.
    assert both(fmt.Jpeg(path=str(path), **kwargs), ld.Jpeg(path=str(path), **kwargs), "image:jpg") == path.read_bytes()
    both(fmt.Jpeg(bytes=path.read_bytes(), **kwargs), ld.Jpeg(bytes=path.read_bytes(), **kwargs), "jpeg")
    both(fmt.Jpeg(array=array, **kwargs), ld.Jpeg(array=array, **kwargs), "jpeg")
    png = PIL.fromarray(array)
    both(fmt.Jpeg(image=png, **kwargs), ld.Jpeg(image=png, **kwargs), "jpeg")


def test_jpeg_array(tmp_path):
    path = jpeg_file(tmp_path)
    ours = fmt.JpegArray(images=[fmt.Jpeg(path=str(path)), fmt.Jpeg(bytes=path.read_bytes())])
    lit = ld.JpegArray(images=[ld.Jpeg(path=str(path)), ld.Jpeg(bytes=path.read_bytes())])
    data = both(ours, lit, "jpeg_array")
    decoded = ours_decode("jpeg_array", data)
    assert len(decoded) == 2 and all(torch.equal(d, pixels(path.read_bytes())) for d in decoded)


@pytest.mark.parametrize(
    "kwargs, name", [({}, "image:png"), ({"format": "jpeg"}, "image:jpg"), ({"quality": 50}, "image:png")]
)
def test_image_wrapper(tmp_path, kwargs, name):
    array = np.random.default_rng(2).integers(0, 256, (8, 10, 3), np.uint8)
    data = both(fmt.Image(array=array, **kwargs), ld.Image(array=array, **kwargs), name)
    assert torch.equal(ours_decode(name, data), pixels(data))
    path = tmp_path / "p.png"
    PIL.fromarray(array).save(path)
    data = both(fmt.Image(path=str(path)), ld.Image(path=str(path)), "image:png")
    assert data == path.read_bytes() and torch.equal(
        ours_decode("image:png", data), torch.from_numpy(array).permute(2, 0, 1)
    )


def test_image_decoding_keeps_pillows_bomb_limit(monkeypatch):
    image = PIL.new("RGB", (64, 64))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    monkeypatch.setattr(PIL, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(PIL.DecompressionBombError):
        ours_decode("image:png", buffer.getvalue())
    data, _ = encode_first(image)
    with pytest.raises(PIL.DecompressionBombError):
        ours_decode("pil", data)


def test_wrappers_are_routed_by_their_paths_extension_as_litdata_does(tmp_path):
    for name, expected in (("a.mp4", "video:mp4"), ("a.png", "image:png"), ("a.pdf", "pdf"), ("a.glb", "mesh:glb")):
        path = tmp_path / name
        path.write_bytes(b"%PDF-1.4 payload" if name.endswith("pdf") else b"payload")
        assert both(fmt.File(path=str(path)), ld.File(path=str(path)), expected) == path.read_bytes()
    path = tmp_path / "a.mp4"
    assert both(fmt.Audio(path=str(path)), ld.Audio(path=str(path)), "video:mp4") == b"payload"
    enc = fmt.ItemEncoder()
    enc.encode({"f": fmt.File(path=str(path))}, 0)
    assert enc.data_format == ["video:mp4"]
    item = enc.encode({"f": fmt.Video(bytes=b"other")}, 1)
    assert item.endswith(b"other")


def test_text_and_file(tmp_path):
    data = both(fmt.Text(text="héllo"), ld.Text(text="héllo"), "text")
    assert ours_decode("text", data) == "héllo" == lit_decode("text", data)
    path = tmp_path / "notes.txt"
    path.write_bytes(b"abc\n")
    data = both(fmt.File(path=str(path)), ld.File(path=str(path)), "file:txt")
    assert ours_decode("file:txt", data) == b"abc\n" == lit_decode("file:txt", data)
    both(fmt.Text(path=str(path)), ld.Text(path=str(path)), "text")


def test_file_subtype_naming_a_format_reads_like_litdata(tmp_path):
    path = tmp_path / "row.json"
    path.write_bytes(b'{"a": [1, 2]}')
    data = both(fmt.File(path=str(path)), ld.File(path=str(path)), "file:json")
    assert ours_decode("file:json", data) == {"a": [1, 2]} == lit_decode("file:json", data)


def test_audio_array_is_the_same_wav():
    wave = np.sin(np.linspace(0, 20, 800)).astype(np.float32)
    data = both(fmt.Audio(array=wave, sampling_rate=8000), ld.Audio(array=wave, sampling_rate=8000), "audio:wav")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ours_decode("audio:wav", data) == data
    assert any("torchcodec" in str(w.message) for w in caught) or fmt.files._torchcodec_decoder("audio") is not None


def test_video_bytes(tmp_path):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    data = both(fmt.Video(path=str(path)), ld.Video(path=str(path)), "video:mp4")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ours_decode("video:mp4", data) == data
    with pytest.raises(ValueError, match="Video\\(path=...\\)"):
        encode_first(fmt.Video(array=np.zeros((2, 4, 4, 3), np.uint8)))


def test_tiff(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    array = np.arange(12, dtype=np.uint16).reshape(3, 4)
    data, name = encode_first(fmt.Tiff(array=array))
    lit_data, lit_name = lit_encode(ld.Tiff(array=array))
    # litdata names it "tiff", which its own reader cannot read; we write "tifffile" and read both.
    assert (name, lit_name) == ("tifffile", "tiff") and data == lit_data
    for leaf in (name, lit_name):
        assert equal(ours_decode(leaf, data), array)
    assert equal(lit_decode("tifffile", data), array)
    path = tmp_path / "a.tif"
    tifffile.imwrite(path, array)
    assert equal(ours_decode("tifffile", encode_first(fmt.Tiff(path=str(path)))[0]), array)


def test_pdf(tmp_path):
    pdfplumber = pytest.importorskip("pdfplumber")
    buffer = io.BytesIO()
    PIL.new("RGB", (20, 30), "white").save(buffer, format="PDF")
    data = both(fmt.Pdf(bytes=buffer.getvalue()), ld.Pdf(bytes=buffer.getvalue()), "pdf")
    document = ours_decode("pdf", data)
    assert isinstance(document, pdfplumber.pdf.PDF) and len(document.pages) == 1


def test_nifti():
    nib = pytest.importorskip("nibabel")
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    data = both(fmt.Nifti(array=array), ld.Nifti(array=array), "nifti:nii")
    image = ours_decode("nifti:nii", data)
    assert isinstance(image, nib.Nifti1Image) and np.array_equal(image.get_fdata(), array)
    assert np.array_equal(lit_decode("nifti:nii", data).get_fdata(), array)


def test_mesh():
    trimesh = pytest.importorskip("trimesh")
    box = trimesh.creation.box()
    data = both(fmt.Mesh(mesh=box), ld.Mesh(mesh=box), "mesh:glb")
    loaded = ours_decode("mesh:glb", data)
    assert np.isclose(loaded.to_geometry().volume if hasattr(loaded, "to_geometry") else loaded.volume, 1.0)


def test_graph_wrapper_and_pyg():
    x, edges = torch.arange(6.0).reshape(3, 2), torch.tensor([[0, 1], [1, 2]])
    data = both(fmt.Graph(x=x, edge_index=edges), ld.Graph(x=x, edge_index=edges), "graph")
    ours, lit = ours_decode("graph", data), lit_decode("graph", data)
    assert torch.equal(ours.x, x) and torch.equal(ours.edge_index, edges)
    assert torch.equal(lit.x, x) and type(ours) is type(lit)
    pyg = pytest.importorskip("torch_geometric.data")
    graph = pyg.Data(x=x, edge_index=edges, y=torch.tensor([1]))
    data = both(graph, graph, "graph")
    back = ours_decode("graph", data)
    assert isinstance(back, pyg.Data) and torch.equal(back.y, graph.y)


def test_graph_pickle_needs_allow_pickle():
    opaque = fmt.Graph(data={"a": [1, 2]})
    data, name = encode_first(opaque)
    assert name == "graph:pickle" and lit_encode(ld.Graph(data={"a": [1, 2]})) == (data, name)
    assert ours_decode(name, data) == {"a": [1, 2]}  # plain data: read without allow_pickle
    odd = encode_first(fmt.Graph(data={"a": [fmt.Text(text="x")]}))[0]
    with pytest.raises(UnsupportedFormatError, match="allow_pickle"):
        ours_decode(name, odd)
    assert ours_decode(name, odd, allow_pickle=True) == {"a": [fmt.Text(text="x")]}


@pytest.mark.parametrize(
    "value",
    [[1, 2, 3], [1.5, -2.0], ["a", "é"], [True, False], [], {"k": [1, 2], "s": "t"}, [{"a": 1, "b": None}, {"a": 2, "b": "x"}],
     [1, "mixed", None], 7, "s", None, [[1], [2, 3]]],
)  # fmt: skip
def test_json_leaf(value):
    data = both(fmt.JsonLeaf(value), serializers.JsonLeaf(value), "json")
    assert ours_decode("json", data) == value == lit_decode("json", data)


def test_json_leaf_damaged_is_an_error():
    data = encode_first(fmt.JsonLeaf(["abc", "def"]))[0]
    with pytest.raises(ValueError, match="truncated|shorter"):
        ours_decode("json", data[:-2])


def test_pickle_leaf_is_data_only_by_default():
    data = both({1, 2}, {1, 2}, "pickle")
    assert ours_decode("pickle", data) == {1, 2}
    evil = pickle.dumps(fmt.Text(text="x"))
    with pytest.raises(UnsupportedFormatError, match="allow_pickle"):
        ours_decode("pickle", evil)


def test_optional_library_missing_is_one_line(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pdfplumber", None)  # "not installed"
    with pytest.raises(UnsupportedFormatError, match="pip install pdfplumber") as caught:
        ours_decode("pdf", b"%PDF-1.4")
    assert "\n" not in str(caught.value)


def test_later_samples_use_the_first_samples_family():
    enc = fmt.ItemEncoder()
    rgb = PIL.new("RGB", (2, 2), "red")
    enc.encode({"im": rgb}, 0)
    assert enc.data_format == ["pil"]
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG")
    buffer.seek(0)
    with PIL.open(buffer) as jpeg:
        item = enc.encode({"im": jpeg}, 1)  # a JPEG at a pil leaf is stored as pixels, as litdata does
    back = fmt.decode_item(item, enc.data_format, enc.data_spec)["im"]
    assert back.size == (2, 2) and back.mode == "RGB"
    with pytest.raises(fmt.SampleFormatError if hasattr(fmt, "SampleFormatError") else ValueError, match="pil"):
        enc.encode({"im": "not an image"}, 2)
