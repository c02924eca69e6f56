"""Local files: round trips through files the tests write, reading in pieces, hashes, and bad files.

Round trips compare with the arrays written, cast to float32 (exact equality: values are written with
`repr`, which float() reads back exactly). Images: a PNG at the declared size comes back as bytes / 255
exactly; resizing is checked against Pillow's own bilinear resize of the same file and against the
invariant that a flat colour stays flat (1e-6); JPEG (lossy) within 3/255 of the colour drawn.
Every bad file must raise DataError (code "data") whose `where` names the file (and line for text).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from scellis_jupyter.data import DataError, load_dataset
from scellis_jupyter.data.info import DatasetInfo, dataset_info

from fixtures.fifo import call_beside_fifo, make_fifo


def _r(v) -> str:
    return repr(float(v))        # shortest round-tripping text of the float64


def _write_csv(path, header, rows, sep=","):
    lines = [sep.join(header)] + [sep.join(str(v) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def table():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 4))
    y = rng.integers(0, 3, 37)
    return x, y


def test_csv_round_trip_default_target_is_last(tmp_path, table):
    x, y = table
    p = tmp_path / "t.csv"
    _write_csv(p, ["a", "b", "c", "d", "label"], [[*map(_r, r), int(t)] for r, t in zip(x, y)])
    ds = load_dataset("t.csv", base_dir=tmp_path)
    xs, ys = ds.read(np.arange(len(ds)))
    np.testing.assert_array_equal(xs, x.astype(np.float32))
    np.testing.assert_array_equal(ys, y)
    assert ds.task == "classification" and ys.dtype == np.int32 and ds.n_classes == len(np.unique(y))
    info = dataset_info(str(p))
    assert (info.n_rows, info.feature_shape, info.feature_dtype) == (len(ds), ds.shapes["x"], ds.x_dtype)
    xr, yr = ds.read([36, 0, 5])
    np.testing.assert_array_equal(xr, x[[36, 0, 5]].astype(np.float32))
    np.testing.assert_array_equal(yr, y[[36, 0, 5]])


def test_csv_target_by_name_string_labels_blank_lines_and_tsv(tmp_path, table):
    x, y = table
    names = np.array(["cat", "ant", "bee"])[y]
    p = tmp_path / "t.tsv"
    rows = [[n, *map(_r, r)] for n, r in zip(names, x)]
    text = "kind\ta\tb\tc\td\n" + "\n".join("\t".join(r) + ("\n" if i % 5 else "\n\n") for i, r in enumerate(rows))
    p.write_text(text, encoding="utf-8")
    ds = load_dataset(str(p), {"target": "kind"})
    xs, ys = ds.read(np.arange(len(ds)))
    assert len(ds) == 37 == dataset_info(str(p)).n_rows
    np.testing.assert_array_equal(xs, x.astype(np.float32))
    assert ds.classes == ["ant", "bee", "cat"]
    np.testing.assert_array_equal(np.array(ds.classes)[ys], names)
    with pytest.raises(DataError) as e:
        load_dataset(str(p), {"target": "knd"})
    assert "did you mean 'kind'" in str(e.value)


def test_csv_float_target_is_regression(tmp_path, table):
    x, _ = table
    p = tmp_path / "r.csv"
    t = x.sum(1) + 0.25
    _write_csv(p, ["a", "b", "c", "d", "t"], [[*map(_r, r), _r(v)] for r, v in zip(x, t)])
    ds = load_dataset(str(p))
    assert ds.task == "regression" and ds.y_dtype == "f32"
    np.testing.assert_array_equal(ds.read(np.arange(37))[1], t.astype(np.float32))


def test_csv_bad_number_names_file_and_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("a,b,y\n1,2,0\n\n3,4,1\n5,x7,0\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_dataset(str(p))
    d = e.value.diagnostic
    assert d.code == "data" and d.where == f"{p}:5" and "'x7'" in d.message and "'b'" in d.message
    p.write_text("a,b,y\n1,2,0\n3,4\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_dataset(str(p))
    assert e.value.diagnostic.where == f"{p}:3" and "2 fields" in e.value.diagnostic.message


def test_empty_missing_and_unknown_files(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty") as e:
        load_dataset(str(tmp_path / "empty.csv"))
    assert str(tmp_path / "empty.csv") in e.value.diagnostic.where
    (tmp_path / "head.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="no data rows"):
        load_dataset(str(tmp_path / "head.csv"))
    with pytest.raises(DataError, match="does not exist") as e:
        load_dataset("nope/missing.csv", base_dir=tmp_path)
    assert e.value.diagnostic.where == str(tmp_path / "nope" / "missing.csv")
    (tmp_path / "x.bin").write_bytes(b"123")
    with pytest.raises(DataError, match="unknown data file type"):
        load_dataset(str(tmp_path / "x.bin"))
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "junk.npy"))
    assert e.value.diagnostic.where == str(tmp_path / "junk.npy")


def test_npy_memmap_with_target(tmp_path):
    x = np.arange(60, dtype=np.float64).reshape(20, 3) / 7
    y = np.arange(20) % 4
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    ds = load_dataset(str(tmp_path / "x.npy"), {"target": "y.npy"})
    assert isinstance(ds._x, np.memmap)
    xs, ys = ds.read([19, 2])
    np.testing.assert_array_equal(xs, x[[19, 2]].astype(np.float32))
    np.testing.assert_array_equal(ys, y[[19, 2]])
    assert xs.dtype == np.float32 and ys.dtype == np.int32 and ds.n_classes == 4
    alone = load_dataset(str(tmp_path / "x.npy"))
    assert alone.read([0])[1] is None and alone.shapes["y"] is None
    np.save(tmp_path / "short.npy", y[:5])
    with pytest.raises(DataError, match="5"):
        load_dataset(str(tmp_path / "x.npy"), {"target": "short.npy"})


@pytest.mark.parametrize("keys", [("x", "y"), ("features", "labels"), ("X", "targets")])
def test_npz_round_trip_and_dataset_info(tmp_path, keys):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((30, 2, 3)), rng.integers(0, 5, 30)
    np.savez(tmp_path / "d.npz", **{keys[0]: x, keys[1]: y})
    ds = load_dataset(str(tmp_path / "d.npz"))
    xs, ys = ds.read(np.arange(30))
    np.testing.assert_array_equal(xs, x.astype(np.float32))
    np.testing.assert_array_equal(ys, y)
    assert ds.info() == DatasetInfo("d.npz", 30, (2, 3), "f32", len(np.unique(y)), "classification")
    assert ds.info() == dataset_info(str(tmp_path / "d.npz"))


def test_npz_wrong_keys(tmp_path):
    np.savez(tmp_path / "w.npz", data=np.zeros((3, 2)), lab=np.zeros(3))
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "w.npz"))
    assert "data, lab" in e.value.diagnostic.message and "x, X" in e.value.diagnostic.hint
    np.savez(tmp_path / "m.npz", x=np.zeros((3, 2)), y=np.zeros(4))
    with pytest.raises(DataError, match="same number of rows"):
        load_dataset(str(tmp_path / "m.npz"))


def test_parquet_round_trip_reads_only_needed_row_groups(tmp_path, table):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    x, y = table
    tab = pa.table({"f0": x[:, 0], "f1": x[:, 1].astype(np.float32), "f2": np.arange(37, dtype=np.int64),
                    "label": np.array(["no", "yes", "maybe"])[y]})
    pq.write_table(tab, tmp_path / "t.parquet", row_group_size=10)
    ds = load_dataset(str(tmp_path / "t.parquet"), {"target": "label"})
    assert ds._pf.metadata.num_row_groups == 4 and len(ds) == 37
    xs, ys = ds.read([35, 2, 31])
    want = np.stack([x[:, 0], x[:, 1].astype(np.float32), np.arange(37)], 1).astype(np.float32)[[35, 2, 31]]
    np.testing.assert_array_equal(xs, want)
    assert [ds.classes[i] for i in ys] == [["no", "yes", "maybe"][t] for t in y[[35, 2, 31]]]
    assert ds.row_groups_read == 2          # rows 31 and 35 share the last group, row 2 is in the first
    default = load_dataset(str(tmp_path / "t.parquet"))
    assert default.target == "label" and default.x_shape == (3,)
    pq.write_table(pa.table({"s": ["a", "b"], "t": [0, 1]}), tmp_path / "s.parquet")
    with pytest.raises(DataError, match="'s' has type string"):
        load_dataset(str(tmp_path / "s.parquet"))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nonsense")
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "bad.parquet"))
    assert e.value.diagnostic.where == str(tmp_path / "bad.parquet")


def test_parquet_missing_pyarrow_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "t.parquet").write_bytes(b"")
    for mod in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "pyarrow", None)        # import pyarrow -> ImportError
    with pytest.raises(DataError) as e:
        load_dataset(str(tmp_path / "t.parquet"))
    assert "pip install scellis-jupyter[data]" in e.value.diagnostic.hint
    assert "pyarrow" in e.value.diagnostic.message


def _image_folder(tmp_path, size=(6, 5)):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(2)
    root = tmp_path / "imgs"
    arrays = {}
    for cls in ("dog", "cat"):
        (root / cls).mkdir(parents=True)
        for k in range(3):
            a = rng.integers(0, 256, size + (3,), dtype=np.uint8)
            Image.fromarray(a, "RGB").save(root / cls / f"{k}.png")
            arrays[(cls, k)] = a
    (root / "cat" / "notes.txt").write_text("not an image")
    return Image, root, arrays


def test_image_folder_exact_at_declared_size(tmp_path):
    Image, root, arrays = _image_folder(tmp_path)
    ds = load_dataset(str(root), {"input": {"shape": [3, 6, 5]}})
    assert len(ds) == 6 and ds.classes == ["cat", "dog"] and ds.shapes["x"] == (3, 6, 5)
    x, y = ds.read(np.arange(6))
    assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    for i, (cls, k) in enumerate([("cat", 0), ("cat", 1), ("cat", 2), ("dog", 0), ("dog", 1), ("dog", 2)]):
        np.testing.assert_array_equal(x[i], arrays[(cls, k)].transpose(2, 0, 1).astype(np.float32) / 255)
        assert y[i] == ds.classes.index(cls)


def test_image_folder_resize_grey_and_jpeg(tmp_path):
    Image, root, _ = _image_folder(tmp_path)
    ds = load_dataset(str(root), {"image_size": [4, 8]})
    x, _ = ds.read([0])
    with Image.open(root / "cat" / "0.png") as im:
        ref = np.asarray(im.convert("RGB").resize((8, 4), Image.BILINEAR), np.float32) / 255
    np.testing.assert_allclose(x[0], ref.transpose(2, 0, 1), atol=1e-6)
    flat = tmp_path / "flat"
    (flat / "a").mkdir(parents=True)
    Image.new("RGB", (9, 7), (200, 40, 90)).save(flat / "a" / "p.png")
    Image.new("RGB", (9, 7), (10, 250, 128)).save(flat / "a" / "q.jpg", quality=95)
    g = load_dataset(str(flat), {"input": {"shape": [1, 3, 3]}})
    xg, _ = g.read([0])
    grey = Image.new("RGB", (1, 1), (200, 40, 90)).convert("L").getpixel((0, 0)) / 255
    assert xg.shape == (1, 1, 3, 3) and np.allclose(xg, grey, atol=1e-6)
    c = load_dataset(str(flat), {"input": {"shape": [3, 2, 2]}})
    xc, _ = c.read([1])
    np.testing.assert_allclose(xc[0], np.array([10, 250, 128], np.float32)[:, None, None] / 255
                               * np.ones((3, 2, 2)), atol=3 / 255)


def test_image_folder_errors(tmp_path):
    Image, root, _ = _image_folder(tmp_path)
    with pytest.raises(DataError, match="declared image size"):
        load_dataset(str(root))
    (tmp_path / "none").mkdir()
    with pytest.raises(DataError, match="no class subfolders"):
        load_dataset(str(tmp_path / "none"), {"image_size": 4})
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG broken")
    ds = load_dataset(str(root), {"image_size": 4})
    bad = ds.files.index(root / "dog" / "broken.png")
    with pytest.raises(DataError) as e:
        ds.read([bad])
    assert e.value.diagnostic.where == str(root / "dog" / "broken.png")


def test_file_hashes_cover_bytes_and_options(tmp_path, table):
    x, y = table
    p = tmp_path / "t.csv"
    _write_csv(p, ["a", "b", "c", "d", "e"], [[*map(_r, r), int(t)] for r, t in zip(x, y)])
    h1 = load_dataset(str(p)).content_hash()
    assert load_dataset(str(p)).content_hash() == h1
    assert load_dataset(str(p), {"target": "a"}).content_hash() != h1
    import blake3
    assert h1 != blake3.blake3(p.read_bytes()).hexdigest()          # options are part of what is hashed
    (tmp_path / "copy.csv").write_bytes(p.read_bytes())
    assert load_dataset(str(tmp_path / "copy.csv")).content_hash() == h1   # bytes, not the path
    p.write_bytes(p.read_bytes()[:-2] + (b"2\n" if p.read_bytes()[-2:] != b"2\n" else b"1\n"))
    assert load_dataset(str(p)).content_hash() != h1


@pytest.mark.parametrize("name", ["pipe.csv", "pipe.npy", "pipe.parquet"])
def test_a_fifo_is_refused_not_opened(tmp_path, name):
    """Opening a named pipe to read waits for a writer forever: only regular files (and folders) are data."""
    fifo = make_fifo(tmp_path / name)
    err = call_beside_fifo(lambda: load_dataset(str(fifo)), fifo)
    assert isinstance(err, DataError), err
    d = err.diagnostic
    assert d.where == str(fifo) and "not a regular file" in d.message and "FIFO" in d.message, d.format()


def test_a_fifo_as_the_npy_target_is_refused_not_opened(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 2)))
    fifo_y = make_fifo(tmp_path / "y.npy")                    # an .npy's target file too
    err = call_beside_fifo(lambda: load_dataset(str(tmp_path / "x.npy"), {"target": "y.npy"}), fifo_y)
    assert isinstance(err, DataError) and err.diagnostic.where == str(fifo_y), err
