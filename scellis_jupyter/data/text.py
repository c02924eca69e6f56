"""Text classification data: sentences and labels, tokenized once into fixed-length rows of token ids.

Why a Hugging Face `tokenizer.json` read with `tokenizers`: it is the file a pretrained model ships with
(normalizer, word pieces, special tokens), so ids here are the ids the model was trained on. Every text
becomes exactly `seq_len` ids: truncated (the special tokens kept, as the model's own tokenizer does)
or padded on the right with the tokenizer's pad id. Layers find the padding from that id (bert_block,
masked_mean_pool `pad_id`), so a sentence's embedding does not depend on how much padding follows it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ScellisError
from .info import balanced_rows, pydoc_sentences, text_table
from .resources import resolve_resource
from .dataset import DataError, Dataset, hash_arrays, hash_files


def load_tokenizer(path: str | os.PathLike, seq_len: int):
    """(Tokenizer, pad id) from a tokenizer.json, set to truncate and pad every text to `seq_len` ids."""
    try:
        from tokenizers import Tokenizer
    except ImportError:                                           # pragma: no cover - a declared dependency
        raise DataError("text datasets need the 'tokenizers' package", hint="pip install tokenizers") from None
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
        raise DataError(f"seq_len={seq_len!r} must be an integer >= 1", where=str(path))
    try:
        tk = Tokenizer.from_file(str(path))
    except Exception as e:                                        # tokenizers raises a bare Exception
        raise DataError(f"{path} is not a readable tokenizer.json: {e}", where=str(path),
                        hint="give the tokenizer.json saved with the model (Hugging Face tokenizers format)") from None
    pad = tk.padding or {}
    pad_token = pad.get("pad_token") or ("[PAD]" if tk.token_to_id("[PAD]") is not None else None)
    pad_id = pad.get("pad_id") if tk.padding else tk.token_to_id(pad_token) if pad_token else None
    if pad_id is None:
        raise DataError(f"{path} names no padding token", where=str(path),
                        hint="the tokenizer needs a [PAD] token (or a padding section) to pad to seq_len")
    tk.enable_truncation(int(seq_len))
    tk.enable_padding(length=int(seq_len), pad_id=int(pad_id), pad_token=pad_token or "[PAD]")
    return tk, int(pad_id)


def encode(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """int32 [len(texts), seq_len] ids with the tokenizer's truncation and padding."""
    enc = tokenizer.encode_batch([str(t) for t in texts])
    return np.asarray([e.ids for e in enc], dtype=np.int32).reshape(len(texts), -1)


class TextDataset(Dataset):
    """Texts with integer labels, held as token ids [n, seq_len] (i32) and labels [n] (i32).

    `classes` names the labels (index = label); `texts` keeps the sentences for inspection; `pad_id` is
    the id padding uses (what a model's `pad_id` must be).
    """

    task = "classification"
    x_dtype = y_dtype = "i32"

    def __init__(self, texts: Sequence[str], labels, tokenizer: str | os.PathLike, seq_len: int, *,
                 name: str = "text", classes: Sequence[str] | None = None, meta: dict | None = None):
        texts = [str(t) for t in texts]
        y = np.asarray(labels)
        if y.ndim != 1 or len(y) != len(texts):
            raise DataError(f"{len(texts)} texts but labels of shape {y.shape}", where=name,
                            hint="one integer label per text")
        if len(y) and (y.dtype.kind not in "iu" or y.min() < 0):
            raise DataError("labels must be integers >= 0", where=name, hint="map class names to 0..k-1 first")
        self.name, self.texts, self.seq_len = name, texts, int(seq_len)
        self.tokenizer_path = Path(tokenizer)
        tk, self.pad_id = load_tokenizer(self.tokenizer_path, self.seq_len)
        self.ids = encode(tk, texts) if texts else np.zeros((0, self.seq_len), np.int32)
        self.labels = y.astype(np.int32)
        self.n_rows = len(texts)
        self.x_shape, self.y_shape = (self.seq_len,), ()
        self.classes = tuple(classes) if classes is not None else None
        self.n_classes = len(self.classes) if self.classes is not None else (int(y.max()) + 1 if len(y) else 0)
        self.truncated = int(np.sum(self.ids[:, -1] != self.pad_id)) if len(texts) else 0   # texts that filled L
        self._meta = dict(meta or {})

    def _read(self, idx):
        return self.ids[idx], self.labels[idx]

    def _targets(self):
        return self.labels

    def _hash(self):
        meta = {"source": self.name, "seq_len": self.seq_len, "pad_id": self.pad_id,
                "tokenizer": hash_files([self.tokenizer_path], {}), **self._meta}
        return hash_arrays({"x": self.ids, "y": self.labels}, meta)


def pydoc_sentences_dataset(tokenizer: str | os.PathLike, seq_len: int = 128, n_rows: int | None = None) -> TextDataset:
    """Sentences of CPython's pydoc topics labelled by group (statements, expressions, builtin types, data
    model; see data.info.PYDOC_GROUPS); `n_rows` takes a class-balanced subset."""
    texts, labels, classes = pydoc_sentences()
    try:
        rows = balanced_rows(labels, n_rows, len(classes))
    except ScellisError as e:
        raise DataError(e.diagnostic.message, where="pydoc_sentences", hint=e.diagnostic.hint) from None
    return TextDataset([texts[i] for i in rows], np.asarray([labels[i] for i in rows], np.int32), tokenizer,
                       seq_len, name="pydoc_sentences", classes=classes, meta={"n_rows": n_rows})


def text_file_dataset(path: str | os.PathLike, tokenizer: str | os.PathLike, seq_len: int = 128,
                      text: str = "text", target: str = "label") -> TextDataset:
    """A .csv/.tsv (header row) or .jsonl file of texts and labels. Integer labels are used as they are;
    any other labels are class names, numbered in sorted order."""
    p = Path(path)
    try:
        texts, raw = text_table(p, text, target)
    except ScellisError as e:
        raise DataError(e.diagnostic.message, where=e.diagnostic.where, hint=e.diagnostic.hint) from None
    try:
        labels = np.asarray([int(v) for v in raw], np.int64)
        classes = None
    except ValueError:
        classes = sorted(set(raw))
        lut = {c: i for i, c in enumerate(classes)}
        labels = np.asarray([lut[v] for v in raw], np.int64)
    if len(labels) and labels.min() < 0:
        raise DataError(f"{p.name}: integer labels must be >= 0, got {int(labels.min())}", where=str(p))
    return TextDataset(texts, labels, tokenizer, seq_len, name=p.name, classes=classes,
                       meta={"file": hash_files([p], {"text": text, "target": target})})


def load_text(name: str, data: dict, base_dir: str | os.PathLike | None = None) -> TextDataset:
    """The text dataset a spec's [data] describes (dataset, tokenizer, seq_len, text, target, n_rows)."""
    tok = data.get("tokenizer")
    if tok is None:
        raise DataError(f"text dataset {name!r} needs a tokenizer", where="[data]",
                        hint='tokenizer = "tokenizer.json" or "package:<pkg>/<path>"')
    try:
        tok_path = resolve_resource(str(tok), base_dir, where="[data] tokenizer", what="tokenizer")
    except ScellisError as e:
        raise DataError(e.diagnostic.message, where=e.diagnostic.where, hint=e.diagnostic.hint) from None
    seq_len = data.get("seq_len", 128)
    if name == "pydoc_sentences":
        return pydoc_sentences_dataset(tok_path, seq_len, data.get("n_rows"))
    p = Path(name).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    try:
        ok = p.is_file()
    except (OSError, ValueError) as e:        # a name too long for the file system, a NUL byte in it
        raise DataError(f"text dataset {str(p)[:60]!r} is not a usable path: {e}", where="[data] dataset") from None
    if not ok:
        raise DataError(f"text dataset file {str(p)[:300]!r} does not exist (or is a folder)", where="[data] dataset")
    return text_file_dataset(p, tok_path, seq_len, data.get("text", "text"), data.get("target", "label"))
