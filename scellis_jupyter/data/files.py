"""Local files as datasets: CSV/TSV, NPY/NPZ, Parquet, and class-per-subfolder image folders.

Why each reads in pieces: a loader with a memory budget asks for a few batches at a time, so a source
must not load the whole file for one batch. CSV keeps one byte offset per row (found in one validating
pass) and parses only the rows asked for; NPY is memory-mapped; Parquet reads only the row groups that
hold the rows; image folders decode one file per example. NPZ members are zip entries and are loaded
whole on first use. Every failure names the file (and line, for text) in a `DataError`.
"""
from __future__ import annotations

import importlib
from array import array
from pathlib import Path

import numpy as np

from ..errors import did_you_mean
from .dataset import (ArrayDataset, DataError, Dataset, features_dtype, hash_files,
                      labels_dtype)
from .info import check_regular, csv_rows, csv_split

X_KEYS = ("x", "X", "features", "inputs")       # as data.info._file_info looks them up
Y_KEYS = ("y", "Y", "labels", "targets")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_INSTALL = "pip install scellis-jupyter[data]"


def _need(module: str, what: str, where: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"reading {what} needs the optional package {module.split('.')[0]!r}, which is not "
                        f"installed", where=where, hint=_INSTALL) from None


def _labels_from_values(values: list[str], where: str):
    """Text labels -> (array, task, classes): all integers -> classes i32; numbers -> regression f32;
    anything else -> class names (sorted) mapped to ids 0..k-1."""
    try:
        nums = np.array([float(v) for v in values], dtype=np.float64)
    except ValueError:
        classes = sorted(set(values))
        lut = {c: i for i, c in enumerate(classes)}
        return np.array([lut[v] for v in values], np.int32), "classification", classes
    if nums.size and np.all(np.isfinite(nums)) and np.all(nums == np.round(nums)):
        return nums.astype(np.int32), "classification", None
    return nums.astype(np.float32), "regression", None


# ---- CSV / TSV ---------------------------------------------------------------------------------------
class CsvDataset(Dataset):
    """A delimited text file with a header row; the target column by name (default: the last one).

    Blank lines are skipped (as `dataset_info` counts rows). Features are f32; the target follows
    `_labels_from_values`. One pass at load validates every value and records each row's byte offset;
    `read` then seeks to and parses only the rows asked for.
    """

    def __init__(self, path: Path, target: str | None = None, sep: str | None = None):
        self.path = Path(path)
        self.name = self.path.name
        self.sep = sep or ("\t" if self.path.suffix.lower() == ".tsv" else ",")
        self._scan(target)

    def _split(self, line: str) -> list[str]:
        return csv_split(line, self.sep)

    def _where(self, lineno: int) -> str:
        return f"{self.path}:{lineno}"

    def _scan(self, target):
        offsets, labels = array("q"), []          # 8 bytes per row, not a Python int each
        with open(self.path, "rb") as f:
            rows = csv_rows(f, self.path, self.sep)    # the header and row checks the plan makes too
            _, _, header = next(rows)
            if target is None:
                ti = len(header) - 1
            elif target in header:
                ti = header.index(target)
            else:
                raise DataError(f"no column named {target!r}", where=self._where(1),
                                hint=did_you_mean(target, header) or f"columns: {', '.join(header)}")
            self.columns, self.target = header, header[ti]
            self._ti = ti
            for lineno, pos, fields in rows:
                self._parse(fields, lineno)
                offsets.append(pos)
                labels.append(fields[ti].strip())
        self._offsets = np.frombuffer(offsets, dtype=np.int64)
        self.n_rows = len(offsets)
        self.x_shape, self.x_dtype = (len(header) - 1 if len(header) > 1 else len(header),), "f32"
        y, self.task, self.classes = _labels_from_values(labels, str(self.path))
        self._y = y
        self.y_shape, self.y_dtype = (), ("i32" if y.dtype == np.int32 else "f32")
        self.n_classes = (len(self.classes) if self.classes is not None else
                          int(len(np.unique(y))) if self.task == "classification" else None)

    def _parse(self, fields: list[str], lineno: int) -> list[float]:
        out = []
        for j, v in enumerate(fields):
            if j == self._ti and len(fields) > 1:
                continue
            try:
                out.append(float(v))
            except ValueError:
                raise DataError(f"column {self.columns[j]!r} has the value {v.strip()!r}, which is not a number",
                                where=self._where(lineno) if lineno > 0 else str(self.path),
                                hint="features must be numeric; only the target column may hold class names"
                                ) from None
        return out

    def _read(self, idx):
        x = np.empty((idx.size,) + self.x_shape, np.float32)
        with open(self.path, "rb") as f:
            for k, i in enumerate(idx):
                f.seek(int(self._offsets[i]))
                line = f.readline().decode("utf-8").rstrip("\r\n")
                x[k] = self._parse(self._split(line), -1)
        return x, self._y[idx]

    def _targets(self):
        return self._y

    def _hash(self):
        return hash_files([self.path], {"format": "csv", "sep": self.sep, "target": self.target})


# ---- NPY / NPZ ---------------------------------------------------------------------------------------
def _np_load(path: Path, **kw):
    try:
        return np.load(path, allow_pickle=False, **kw)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"cannot read the array file: {e}", where=str(path),
                        hint="write it with numpy.save / numpy.savez (no pickled objects)") from None


class NpyDataset(Dataset):
    """A memory-mapped .npy of features (rows first), with labels from a second .npy (`target`) or none.

    Only the rows a batch asks for are copied out of the map (integers -> i32, others -> f32).
    """

    def __init__(self, path: Path, target: Path | None = None):
        self.path, self.name = Path(path), Path(path).name
        self._x = _np_load(self.path, mmap_mode="r")
        if not isinstance(self._x, np.ndarray) or self._x.ndim < 1:
            raise DataError("the array needs a leading row axis", where=str(self.path))
        self.n_rows, self.x_shape = int(self._x.shape[0]), tuple(int(s) for s in self._x.shape[1:])
        self._xd = features_dtype(self._x.dtype)
        self.x_dtype = "i32" if self._xd == np.int32 else "f32"
        self.target_path, self._y = None, None
        if target is not None:
            self.target_path = Path(target)
            if not self.target_path.exists():
                raise DataError("the target file does not exist", where=str(self.target_path))
            self._y = _np_load(self.target_path, mmap_mode="r")
            if self._y.ndim < 1 or self._y.shape[0] != self.n_rows:
                raise DataError(f"labels have shape {self._y.shape} but the features have {self.n_rows} rows",
                                where=str(self.target_path))
            self._yd, self.task = labels_dtype(self._y.dtype)
            self.y_shape = tuple(int(s) for s in self._y.shape[1:])
            self.y_dtype = "i32" if self._yd == np.int32 else "f32"
            if self.task == "classification":
                self.n_classes = int(len(np.unique(self._y)))

    def _read(self, idx):
        x = np.asarray(self._x[idx], dtype=self._xd)
        return x, None if self._y is None else np.asarray(self._y[idx], dtype=self._yd)

    def _targets(self):
        return None if self._y is None else np.asarray(self._y, dtype=self._yd)

    def _hash(self):
        files = [self.path] + ([self.target_path] if self.target_path else [])
        return hash_files(files, {"format": "npy", "target": self.target_path is not None})


def load_npz(path: Path) -> "NpzDataset":
    """An .npz holding features under x/X/features/inputs and optionally labels under y/Y/labels/targets."""
    with _np_load(path) as z:
        xkey = next((k for k in X_KEYS if k in z.files), None)
        if xkey is None:
            raise DataError(f"no feature array in the archive (it holds {', '.join(z.files) or 'nothing'})",
                            where=str(path), hint=f"name the features one of {', '.join(X_KEYS)} "
                                                  f"and the labels one of {', '.join(Y_KEYS)}")
        ykey = next((k for k in Y_KEYS if k in z.files), None)
        x = z[xkey]
        y = z[ykey] if ykey is not None else None
    if x.ndim < 1 or (y is not None and (y.ndim < 1 or y.shape[0] != x.shape[0])):
        raise DataError(f"{xkey!r} has shape {x.shape} and {ykey!r} has shape "
                        f"{None if y is None else y.shape}: they need the same number of rows", where=str(path))
    task = None
    if y is not None:
        yd, task = labels_dtype(y.dtype)
        y = y.astype(yd)
    return NpzDataset(x.astype(features_dtype(x.dtype)), y, name=Path(path).name, task=task,
                      file_hash=(Path(path), {"format": "npz", "x": xkey, "y": ykey}))


class NpzDataset(ArrayDataset):
    """An .npz loaded whole; its content hash is over the file bytes and the keys used."""

    def __init__(self, x, y, *, name, task, file_hash):
        super().__init__(x, y, name=name, task=task)
        self._file = file_hash

    def _hash(self):
        return hash_files([self._file[0]], self._file[1])


# ---- Parquet -----------------------------------------------------------------------------------------
class ParquetDataset(Dataset):
    """A Parquet table: numeric feature columns and one target column (by name, default the last).

    `read` decodes only the row groups holding the requested rows (one at a time).
    """

    def __init__(self, path: Path, target: str | None = None):
        pq = _need("pyarrow.parquet", "Parquet files", str(path))
        self.path, self.name = Path(path), Path(path).name
        try:
            self._pf = pq.ParquetFile(self.path)
        except Exception as e:  # pyarrow raises its own ArrowInvalid for a file that is not Parquet
            raise DataError(f"cannot read the Parquet file: {e}", where=str(self.path)) from None
        names = list(self._pf.schema_arrow.names)
        if not names:
            raise DataError("the table has no columns", where=str(self.path))
        if target is not None and target not in names:
            raise DataError(f"no column named {target!r}", where=str(self.path),
                            hint=did_you_mean(target, names) or f"columns: {', '.join(names)}")
        self.target = target or names[-1]
        self.features = [n for n in names if n != self.target] if len(names) > 1 else names
        schema = self._pf.schema_arrow
        import pyarrow as pa
        for c in self.features:
            t = schema.field(c).type
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
                raise DataError(f"feature column {c!r} has type {t}, not a number", where=str(self.path),
                                hint=f"make it numeric, or name it as the target (target = {c!r})")
        md = self._pf.metadata
        counts = np.array([md.row_group(g).num_rows for g in range(md.num_row_groups)], np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self.n_rows = int(md.num_rows)
        if self.n_rows == 0:
            raise DataError("the table has no rows", where=str(self.path))
        self.x_shape, self.x_dtype = (len(self.features),), "f32"
        ycol = self._pf.read(columns=[self.target]).column(0)
        t = ycol.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
            vals = [str(v) for v in ycol.to_pylist()]
            self.classes = sorted(set(vals))
            lut = {c: i for i, c in enumerate(self.classes)}
            y, self.task = np.array([lut[v] for v in vals], np.int32), "classification"
        else:
            self.classes = None
            raw = ycol.to_numpy(zero_copy_only=False)
            yd, self.task = labels_dtype(raw.dtype)
            y = raw.astype(yd)
        self._y = y
        self.y_shape, self.y_dtype = (), ("i32" if y.dtype == np.int32 else "f32")
        self.n_classes = (int(len(np.unique(y))) if self.task == "classification" else None)
        self.row_groups_read = 0            # how many row groups `read` has decoded (streaming is testable)

    def _read(self, idx):
        x = np.empty((idx.size,) + self.x_shape, np.float32)
        groups = np.searchsorted(self._starts, idx, side="right") - 1
        for g in np.unique(groups):
            sel = np.nonzero(groups == g)[0]
            tab = self._pf.read_row_group(int(g), columns=self.features)
            self.row_groups_read += 1
            local = idx[sel] - self._starts[g]
            for j, c in enumerate(self.features):
                col = tab.column(c).to_numpy(zero_copy_only=False)
                x[sel, j] = col[local]
        return x, self._y[idx]

    def _targets(self):
        return self._y

    def _hash(self):
        return hash_files([self.path], {"format": "parquet", "target": self.target})


# ---- image folders -----------------------------------------------------------------------------------
class ImageFolder(Dataset):
    """root/<class>/<image>.png|jpg|jpeg; classes sorted by name; each image converted to `channels`
    (1: grey, 3: RGB), resized to (height, width) bilinearly, and given as C×H×W f32 in [0, 1]."""

    def __init__(self, root: Path, size: tuple, channels: int = 3):
        self.root, self.name = Path(root), Path(root).name
        self._pil = _need("PIL.Image", "images", str(root))
        if channels not in (1, 3):
            raise DataError(f"images have 1 or 3 channels, {channels} were declared", where=str(root))
        h, w = (int(s) for s in size)
        if h < 1 or w < 1:
            raise DataError(f"image size {size} must be positive", where=str(root))
        self.channels, self.size = int(channels), (h, w)
        self.classes = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not self.classes:
            raise DataError("the folder has no class subfolders", where=str(root),
                            hint="put each class's images in its own subfolder: root/<class>/<image>.png")
        files, labels = [], []
        for c, cls in enumerate(self.classes):
            for p in sorted((self.root / cls).iterdir()):
                if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
                    files.append(p)
                    labels.append(c)
        if not files:
            raise DataError(f"no {'/'.join(IMAGE_SUFFIXES)} files in the class subfolders", where=str(root))
        self.files, self._y = files, np.array(labels, np.int32)
        self.n_rows, self.task, self.n_classes = len(files), "classification", len(self.classes)
        self.x_shape, self.x_dtype = (self.channels, h, w), "f32"
        self.y_shape, self.y_dtype = (), "i32"

    def _image(self, path: Path) -> np.ndarray:
        Image = self._pil
        try:
            with Image.open(path) as im:
                im = im.convert("L" if self.channels == 1 else "RGB")
                if im.size != (self.size[1], self.size[0]):
                    im = im.resize((self.size[1], self.size[0]), Image.BILINEAR)
                a = np.asarray(im, dtype=np.float32) / np.float32(255.0)
        except (OSError, ValueError) as e:  # PIL.UnidentifiedImageError is an OSError
            raise DataError(f"cannot decode the image: {e}", where=str(path)) from None
        return a[None] if a.ndim == 2 else np.ascontiguousarray(a.transpose(2, 0, 1))

    def _read(self, idx):
        x = np.empty((idx.size,) + self.x_shape, np.float32)
        for k, i in enumerate(idx):
            x[k] = self._image(self.files[int(i)])
        return x, self._y[idx]

    def _targets(self):
        return self._y

    def _hash(self):
        return hash_files(self.files, {"format": "image-folder", "size": list(self.size),
                                       "channels": self.channels, "classes": self.classes}, root=self.root)


def image_size(data: dict, where: str) -> tuple[int, tuple[int, int]]:
    """(channels, (H, W)) from the [data] table: input.shape = [C, H, W], or image_size = [H, W] (+ channels)."""
    shape = (data.get("input") or {}).get("shape") if isinstance(data.get("input"), dict) else None
    if shape is not None and len(shape) == 3:
        return int(shape[0]), (int(shape[1]), int(shape[2]))
    if data.get("image_size") is not None:
        s = data["image_size"]
        s = (s, s) if isinstance(s, int) else tuple(s)
        return int(data.get("channels", 3)), (int(s[0]), int(s[1]))
    raise DataError("an image folder needs a declared image size", where=where,
                    hint="set input = { shape = [3, 32, 32] } (C, H, W) in [data], or image_size = [32, 32]")


def load_file(path: Path, data: dict) -> Dataset:
    """The dataset a path names, chosen by its suffix (a directory is an image folder)."""
    try:
        return _load_file(path, data)
    except OSError as e:                  # unreadable, a name too long, a folder where a file was named
        raise DataError(f"cannot read the dataset: {(e.strerror or str(e)).lower()}", where=str(path)[:300],
                        hint="check the path and its permissions") from None
    except UnicodeDecodeError as e:
        raise DataError(f"the file is not UTF-8 text ({e.reason} at byte {e.start})", where=str(path)) from None


def _load_file(path: Path, data: dict) -> Dataset:
    try:
        exists = path.exists()
    except ValueError:
        raise DataError("the path holds a NUL byte", where=repr(str(path))[:300]) from None
    if not exists:
        raise DataError("the file does not exist", where=str(path),
                        hint="check the path (relative paths are taken from the spec's folder)")
    check_regular(path)                   # a FIFO would block the open below forever
    if path.is_dir():
        ch, size = image_size(data, str(path))
        return ImageFolder(path, size, ch)
    suffix = path.suffix.lower()
    target = data.get("target")
    if suffix in (".csv", ".tsv"):
        return CsvDataset(path, target, data.get("sep"))
    if suffix == ".npy":
        t = None
        if target is not None:
            t = Path(target)
            t = t if t.is_absolute() else path.parent / t
            if t.exists():
                check_regular(t, "the target file")
        return NpyDataset(path, t)
    if suffix == ".npz":
        return load_npz(path)
    if suffix in (".parquet", ".pq"):
        return ParquetDataset(path, target)
    raise DataError(f"unknown data file type {suffix or '(no suffix)'!r}", where=str(path),
                    hint="use .csv, .tsv, .npy, .npz, .parquet, or a folder of class subfolders of images")
