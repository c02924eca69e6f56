"""Dataset metadata a spec needs before any data is loaded: rows, feature shape and dtype, classes, task.

Why metadata only: shape inference and the memory plan run before a single batch is read, so a model
can be checked against its data in the spec cell. The classic tabular sets' sizes are facts about those
datasets (scikit-learn need not be installed); the text set is measured from CPython's own docs.
"""
from __future__ import annotations

import numpy as np
import csv
import functools
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import DataError, SpecError, did_you_mean

# every built-in dataset by name (the loaders are in builtin.py and text.py; the spec's names come from here)
BUILTIN_DATASETS = ("digits", "iris", "wine", "breast_cancer", "pydoc_topics", "synthetic_classification",
                    "synthetic_regression", "synthetic_ring", "pydoc_sentences")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    n_rows: int | None
    feature_shape: tuple | None      # per example, batch excluded
    feature_dtype: str | None
    n_classes: int | None            # classes, or the vocabulary size for language modelling
    task: str                        # classification | regression | lm | unknown


# (rows, features, classes): the well-known sizes of the classic sets
_TABULAR = {
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "breast_cancer": (569, 30, 2),
}


# a fixed vocabulary: newline and printable ASCII (96 token ids), the same on every Python version, so a
# spec's embedding and output sizes do not depend on which CPython's docs are installed
PYDOC_VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))


@functools.lru_cache(maxsize=1)
def pydoc_text() -> str:
    """The text of CPython's `pydoc_data.topics`, topics in sorted order, one blank line apart; characters
    outside the vocabulary (tabs, typographic quotes, a few symbols) read as '?'."""
    from pydoc_data.topics import topics
    text = "\n\n".join(topics[k] for k in sorted(topics))
    keep = set(PYDOC_VOCAB)
    return "".join(c if c in keep else "?" for c in text)


def pydoc_vocab() -> str:
    """The vocabulary: index = token id."""
    return PYDOC_VOCAB


# Sentences of the pydoc topics, labelled by the part of the language reference a topic belongs to. The
# aggregate topics (compound, specialnames, types: they repeat others) and the debugger are left out.
# Why this task: it is real English prose on neighbouring subjects (a `with` statement vs context
# managers, an operator vs the special method behind it), so a sentence embedding must carry meaning, and
# it ships with every CPython, so it needs no download.
PYDOC_GROUPS = {
    "statements": ("assert", "assignment", "augassign", "break", "continue", "del", "global", "nonlocal", "pass",
                   "raise", "return", "yield", "import", "if", "while", "for", "try", "with", "else", "class",
                   "function", "async"),
    "expressions": ("atom-identifiers", "atom-literals", "attribute-references", "await", "binary", "bitwise",
                    "booleans", "calls", "comparisons", "conversions", "exprlists", "lambda", "operator-summary",
                    "power", "shifting", "slicings", "subscriptions", "unary", "in", "floating", "imaginary",
                    "integers", "strings", "formatstrings", "identifiers", "lists", "dict"),
    "builtin types": ("typesseq", "typesseq-mutable", "typesmapping", "typesmethods", "typesmodules",
                      "typesfunctions", "string-methods", "bltin-code-objects", "bltin-ellipsis-object",
                      "bltin-null-object", "bltin-type-objects", "truth"),
    "data model": ("attribute-access", "customization", "sequence-types", "numeric-types", "callable-types",
                   "context-managers", "specialattrs", "objects", "id-classes", "naming", "execmodel",
                   "dynamic-features", "exceptions"),
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def _prose_sentences(text: str) -> list[str]:
    """Sentences of 6..40 words from the prose paragraphs of a topic (code, grammar and examples skipped)."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.split("\n")
        if any(ln.strip().startswith((">>>", "...")) or "::=" in ln for ln in lines):
            continue
        for s in _SENTENCE_END.split(" ".join(ln.strip() for ln in lines)):
            s = " ".join(s.split())
            if 6 <= len(s.split()) <= 40 and s[-1] in ".!?:" and sum(c.isalpha() for c in s) > 0.6 * len(s):
                out.append(s)
    return out


@functools.lru_cache(maxsize=1)
def pydoc_sentences() -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]:
    """(sentences, labels, class names): every prose sentence of the grouped topics, in group then topic order,
    duplicates dropped (first kept). Topics missing from this CPython's docs are skipped."""
    from pydoc_data.topics import topics
    texts, labels, seen = [], [], set()
    for label, group in enumerate(PYDOC_GROUPS.values()):
        for key in group:
            for s in _prose_sentences(topics.get(key, "")):
                if s not in seen:
                    seen.add(s)
                    texts.append(s)
                    labels.append(label)
    return tuple(texts), tuple(labels), tuple(PYDOC_GROUPS)


def balanced_rows(labels, n_rows: int | None, n_classes: int) -> list[int]:
    """Row indices of a class-balanced subset of `n_rows` (n_rows // n_classes per class, evenly spaced
    within each class); all rows when n_rows is None. Deterministic: no random draw."""
    if n_rows is None:
        return list(range(len(labels)))
    per = n_rows // n_classes
    out = []
    for c in range(n_classes):
        rows = [i for i, y in enumerate(labels) if y == c]
        if per > len(rows):
            raise SpecError(f"n_rows = {n_rows} asks {per} rows of class {c}, which has {len(rows)}",
                            hint=f"n_rows at most {n_classes * min(_counts(labels, n_classes))}", kind="range")
        out += [rows[(j * len(rows)) // per] for j in range(per)]
    return sorted(out)


def _counts(labels, n_classes: int) -> list[int]:
    return [sum(1 for y in labels if y == c) for c in range(n_classes)]


def dataset_info(name_or_path: str, data: dict | None = None, *, where: str = "",
                 base_dir: str | os.PathLike | None = None) -> DatasetInfo:
    """Metadata of a built-in dataset or a file; `data` is the spec's [data] table (seq_len, n_rows, ...)."""
    data = data or {}
    name = name_or_path
    if name in _TABULAR:
        rows, feats, classes = _TABULAR[name]
        return DatasetInfo(name, rows, (feats,), "f32", classes, "classification")
    if name == "pydoc_topics":
        seq_len = int(data.get("seq_len", 128))
        text = pydoc_text()
        return DatasetInfo(name, (len(text) - 1) // seq_len, (seq_len,), "i32", len(pydoc_vocab()), "lm")
    if name == "pydoc_sentences":
        seq_len = int(data.get("seq_len", 128))
        _, labels, classes = pydoc_sentences()
        try:
            rows = len(balanced_rows(labels, data.get("n_rows"), len(classes)))
        except SpecError as e:
            raise SpecError(e.diagnostic.message, where=where, hint=e.diagnostic.hint, kind="range") from None
        return DatasetInfo(name, rows, (seq_len,), "i32", len(classes), "classification")
    if name == "synthetic_classification":
        return DatasetInfo(name, int(data.get("n_rows", 1000)), (int(data.get("n_features", 20)),), "f32",
                           int(data.get("n_classes", 2)), "classification")
    if name == "synthetic_regression":
        return DatasetInfo(name, int(data.get("n_rows", 1000)), (int(data.get("n_features", 20)),), "f32",
                           None, "regression")
    if name == "synthetic_ring":
        return DatasetInfo(name, int(data.get("n_rows", 2000)), (2,), "f32", int(data.get("n_classes", 8)),
                           "classification")
    path = Path(name)
    if not path.is_absolute() and base_dir is not None:
        path = Path(base_dir) / path
    try:
        if "\x00" in name:
            raise ValueError("embedded null byte")
        exists = path.exists()
    except (OSError, ValueError) as e:     # a name too long for the file system, a NUL byte in it
        raise SpecError(f"dataset {_short(name)!r} is not a usable path: {path_problem(e)}", where=where,
                        hint="give a built-in dataset name or the path of a file", kind="bad-path") from None
    if not exists:
        looks_like_name = not any(c in name for c in "/\\.")
        hint = did_you_mean(name, BUILTIN_DATASETS) if looks_like_name else ""
        raise SpecError(f"dataset {name!r} is neither a built-in dataset nor an existing file ({path})",
                        where=where, hint=hint or f"built-ins: {', '.join(BUILTIN_DATASETS)}",
                        kind="unknown-dataset", path=str(path))
    try:
        check_regular(path)
        if data.get("tokenizer") is not None:
            return _text_file_info(path, data)
        return _file_info(path, data)
    except DataError as e:                # the loader's own words, pinned to the spec's dataset line
        d = e.diagnostic
        raise in_dataset_file(SpecError(d.message, where=d.where, hint=d.hint, kind="invalid"), where) from None
    except SpecError as e:
        raise in_dataset_file(e, where) from None
    except OSError as e:
        raise SpecError(f"dataset file {str(path)!r} cannot be read: {path_problem(e)}", where=where,
                        kind="unreadable-file", path=str(path)) from None


_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_file(path: Path) -> str:
    """What `path` is when it is neither a regular file nor a folder ('a FIFO (named pipe)', 'a socket', ...),
    else ''. Why: opening a FIFO to read waits for a writer forever, and a device may never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:                       # gone or unreadable: the open that follows says which
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    return next((what for test, what in _SPECIAL if test(mode)), "a special file")


def check_regular(path: Path, what: str = "the dataset") -> None:
    """Refuse (DataError at `path`) a path that is not a regular file or a folder, before anything opens it."""
    kind = special_file(path)
    if kind:
        raise DataError(f"{what} is not a regular file: it is {kind}", where=str(path),
                        hint="give the path of a data file (or a folder of images); save a pipe's data to a "
                             "file first")


def csv_split(line: str, sep: str) -> list[str]:
    """One CSV/TSV row's fields: quoting honoured where the line holds a quote, else a plain split (fast)."""
    if '"' in line:
        return next(csv.reader([line], delimiter=sep))
    return line.split(sep)


def csv_rows(f: BinaryIO, path: Path, sep: str) -> Iterator[tuple[int, int, list[str]]]:
    """(line number, byte offset, fields) of an open CSV/TSV's header row, then of each non-blank data row.

    The checks every reader of the file makes, train's loader and the plan alike: a header row, as many
    fields in each row as in the header, at least one data row; each a DataError at file:line."""
    head = f.readline()
    if not head.strip():
        raise DataError("the file is empty (no header row)", where=str(path),
                        hint="a CSV needs a header row naming the columns, then one row per example")
    header = [h.strip() for h in csv_split(_decode_line(head, f"{path}:1").rstrip("\r\n"), sep)]
    yield 1, 0, header
    pos, lineno, rows = f.tell(), 1, 0
    for raw in f:
        lineno += 1
        line = _decode_line(raw, f"{path}:{lineno}").rstrip("\r\n")
        if line.strip():
            fields = csv_split(line, sep)
            if len(fields) != len(header):
                raise DataError(f"row has {len(fields)} fields, the header has {len(header)}",
                                where=f"{path}:{lineno}", hint=f"separator is {sep!r}")
            rows += 1
            yield lineno, pos, fields
        pos += len(raw)
    if not rows:
        raise DataError("the file has a header but no data rows", where=str(path))


def _decode_line(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"the line is not UTF-8 text ({e.reason} at byte {e.start})", where=where) from None


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 3] + "..."


def path_problem(e: Exception) -> str:
    """What is wrong with a path, in words: 'file name too long', 'it holds a NUL byte', ..."""
    if isinstance(e, OSError):
        return (e.strerror or str(e)).lower()
    return "it holds a NUL byte" if "null" in str(e) else str(e)


def in_dataset_file(e: SpecError, where: str) -> SpecError:
    """A problem found inside a dataset file, pinned to the spec's `dataset` line; the message names the file
    (and its line) the problem is in."""
    d = e.diagnostic
    loc = d.where or ""
    if not loc or loc == where:
        return e
    name = re.escape(Path(loc.rsplit(":", 1)[0] if loc.rsplit(":", 1)[-1].isdigit() else loc).name)
    msg = re.sub(rf"^{name}(:\d+)?:\s+", "", d.message)
    return SpecError(msg if loc in msg else f"dataset file {loc}: {msg}", where=where, hint=d.hint, code=d.code,
                     **{**d.details, "file": loc})


def _not_utf8(path: Path) -> SpecError:
    """The first byte of `path` that is not UTF-8, as a diagnostic at that file line."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
        start, reason = 0, "unknown"
    except UnicodeDecodeError as e:
        start, reason = e.start, e.reason
    line = raw.count(b"\n", 0, start) + 1
    return SpecError(f"{path.name}:{line}: the file is not UTF-8 text (byte 0x{raw[start]:02x}: {reason})",
                     where=f"{path}:{line}", kind="encoding", hint="save the data file as UTF-8")


def text_table(path: Path, text_col: str, target_col: str) -> tuple[list[str], list[str]]:
    """(texts, raw labels) of a CSV/TSV (header row naming the columns) or JSON Lines file."""
    if path.is_dir():
        raise SpecError(f"{path} is a folder; a text dataset is a .csv, .tsv or .jsonl file", where=str(path),
                        kind="invalid", hint="give the path of the file holding the texts and labels")
    check_regular(path, "the text dataset")
    try:
        return _text_table(path, text_col, target_col)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None


def _text_table(path: Path, text_col: str, target_col: str) -> tuple[list[str], list[str]]:
    suffix = path.suffix.lower()
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        if suffix in (".jsonl", ".ndjson"):
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SpecError(f"{path.name}:{lineno}: not JSON: {e.msg}", where=f"{path}:{lineno}",
                                    kind="invalid") from None
                if not isinstance(row, dict) or text_col not in row or target_col not in row:
                    raise SpecError(f"{path.name}:{lineno}: each line needs fields {text_col!r} and {target_col!r}",
                                    where=f"{path}:{lineno}", hint="set text = ... and target = ... in [data]",
                                    kind="invalid")
                texts.append(str(row[text_col]))
                labels.append(str(row[target_col]))
            return texts, labels
        if suffix not in (".csv", ".tsv"):
            raise SpecError(f"text dataset {path.name!r} must be .csv, .tsv or .jsonl", where=str(path),
                            kind="invalid")
        reader = csv.reader(f, delimiter="\t" if suffix == ".tsv" else ",")
        header = next(reader, None)
        if not header:
            raise SpecError(f"{path.name} is empty (no header row)", where=str(path), kind="invalid")
        header = [h.strip() for h in header]
        for col in (text_col, target_col):
            if col not in header:
                raise SpecError(f"{path.name} has no column {col!r}", where=f"{path}:1",
                                hint=did_you_mean(col, header) or f"columns: {', '.join(header)}", kind="invalid")
        ti, yi = header.index(text_col), header.index(target_col)
        for lineno, row in enumerate(reader, 2):
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise SpecError(f"{path.name}:{lineno}: {len(row)} fields, the header has {len(header)}",
                                where=f"{path}:{lineno}", hint="quote fields that contain the delimiter",
                                kind="invalid")
            texts.append(row[ti])
            labels.append(row[yi].strip())
    return texts, labels


def _text_file_info(path: Path, data: dict) -> DatasetInfo:
    texts, labels = text_table(path, data.get("text", "text"), data.get("target", "label"))
    return DatasetInfo(path.name, len(texts), (int(data.get("seq_len", 128)),), "i32", len(set(labels)),
                       "classification")


def _file_info(path: Path, data: dict) -> DatasetInfo:
    """What can be read cheaply from a file's header; unknown fields stay None."""
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            z = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise SpecError(f"{path.name}: cannot read the array file: {e}", where=str(path), kind="invalid",
                            hint="write it with numpy.savez (no pickled objects)") from None
        if not hasattr(z, "files"):
            raise SpecError(f"{path.name}: not an .npz archive", where=str(path), kind="invalid",
                            hint="write it with numpy.savez")
        with z:
            xkey = next((k for k in ("x", "X", "features", "inputs") if k in z.files), None)
            ykey = next((k for k in ("y", "Y", "labels", "targets") if k in z.files), None)
            if xkey is None:
                return DatasetInfo(path.name, None, None, None, None, "unknown")
            x = z[xkey]
            dtype = "i32" if x.dtype.kind in "iu" else "f32"
            classes, task = None, "unknown"
            if ykey is not None:
                y = z[ykey]
                if y.dtype.kind in "iub":
                    classes, task = int(len(np.unique(y))), "classification"
                else:
                    task = "regression"
            return DatasetInfo(path.name, int(x.shape[0]), tuple(int(s) for s in x.shape[1:]), dtype, classes, task)
    if suffix in (".csv", ".tsv"):
        sep = data.get("sep") or ("\t" if suffix == ".tsv" else ",")
        with open(path, "rb") as f:
            lines = csv_rows(f, path, sep)           # the header and row checks the loader makes
            _, _, header = next(lines)
            target = data.get("target")
            if target is not None and target not in header:
                raise DataError(f"no column named {target!r}", where=f"{path}:1",
                                hint=did_you_mean(target, header) or f"columns: {', '.join(header)}")
            rows = sum(1 for _ in lines)
        n_feat = len(header) - 1 if len(header) > 1 else len(header)
        return DatasetInfo(path.name, rows, (n_feat,), "f32", None, "unknown")
    return DatasetInfo(path.name, None, None, None, None, "unknown")
