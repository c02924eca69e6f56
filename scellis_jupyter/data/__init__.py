"""Datasets, splits and batch streams: built-in sets and local files -> `Dataset` -> `split` -> `Batches`.

    ds = load_dataset("digits")                       # or a path: .csv .tsv .npy .npz .parquet, image folder
    sp = split(ds, {"train": 0.8, "val": 0.1, "test": 0.1}, seed=0, stratify=True)
    for x, y in Batches(ds, sp["train"], 64, Generator(0)): ...
"""
from __future__ import annotations

import os

from ..errors import did_you_mean
from .builtin import NAMES as BUILTIN_NAMES
from .builtin import (PydocTopics, builtin, ring_centers, synthetic_classification, synthetic_regression,
                      synthetic_ring, tabular)
from .dataset import ArrayDataset, DataError, Dataset, resolve
from .files import CsvDataset, ImageFolder, NpyDataset, NpzDataset, ParquetDataset, load_file
from .loader import Batches
from .split import Split, split
from .text import TextDataset, load_text, load_tokenizer, pydoc_sentences_dataset, text_file_dataset


def load_dataset(name_or_path: str | os.PathLike | None = None, data_table: dict | None = None,
                 base_dir: str | os.PathLike | None = None) -> Dataset:
    """A built-in dataset by name or a local file/folder, configured by the spec's [data] table.

    Keys used: dataset (when name_or_path is None), seq_len (pydoc_topics), n_rows, n_features, n_classes,
    noise, seed (synthetic sets), target (CSV/Parquet column name; for .npy a labels .npy path), sep,
    tokenizer and text (text datasets: pydoc_sentences or a .csv/.tsv/.jsonl, tokenized to seq_len ids),
    input.shape = [C, H, W] or image_size (image folders). Relative paths are taken from base_dir.
    """
    data = dict(data_table or {})
    if name_or_path is None:
        name_or_path = data.get("dataset")
        if name_or_path is None:
            raise DataError("no dataset named", where="[data]",
                            hint=f'set dataset = "<built-in or path>"; built-ins: {", ".join(BUILTIN_NAMES)}')
    name = os.fspath(name_or_path)
    if data.get("tokenizer") is not None or name == "pydoc_sentences":    # text, tokenized to seq_len ids
        return load_text(name, data, base_dir)
    if name in BUILTIN_NAMES:
        return builtin(name, data)
    path = resolve(name, base_dir)
    try:
        exists = path.exists()
    except (OSError, ValueError) as e:      # a name too long for the file system, a NUL byte in it
        raise DataError(f"dataset {name[:60]!r} is not a usable path: {e}", where=name[:300]) from None
    if not exists and not any(c in name for c in "/\\."):
        raise DataError(f"{name!r} is neither a built-in dataset nor an existing file ({path})",
                        where=name, hint=did_you_mean(name, BUILTIN_NAMES)
                        or f"built-ins: {', '.join(BUILTIN_NAMES)}")
    return load_file(path, data)


__all__ = ["load_dataset", "split", "Split", "Batches", "DataError", "Dataset", "ArrayDataset", "PydocTopics",
           "CsvDataset", "NpyDataset", "NpzDataset", "ParquetDataset", "ImageFolder", "builtin", "tabular",
           "synthetic_classification", "synthetic_regression", "synthetic_ring", "ring_centers", "BUILTIN_NAMES",
           "TextDataset", "load_text", "load_tokenizer", "pydoc_sentences_dataset", "text_file_dataset"]
