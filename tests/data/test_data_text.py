"""Text datasets: texts tokenized to seq_len ids with a tokenizer.json; pydoc_sentences; files; spec checks.

Reference for the ids: transformers' PreTrainedTokenizerFast over the same tokenizer.json with
padding="max_length", truncation=True (its own padding/truncation code, not ours). The pydoc_sentences
labels are checked against CPython's topics directly: each sentence occurs in a topic of its group.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from scellis_jupyter.data import DataError, load_dataset, split
from scellis_jupyter.data.text import TextDataset, load_tokenizer, pydoc_sentences_dataset, text_file_dataset
from scellis_jupyter.spec import Spec, SpecError, dataset_info
from scellis_jupyter.data.info import PYDOC_GROUPS, pydoc_sentences

from fixtures.fifo import call_beside_fifo, make_fifo

tokenizers = pytest.importorskip("tokenizers")

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "a", "dog", "##s", ".", "ran", ","]
TEXTS = ["The cat sat on the mat.", "A dog ran.", "Dogs, cats, dogs, cats, the dogs ran on a mat on a mat.",
         "", "Zebra!"]


def _tokenizer(path, pad_section=False):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    tk = Tokenizer(models.WordPiece({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                               ("[SEP]", 3)])
    if pad_section:
        tk.enable_padding(length=64, pad_id=0, pad_token="[PAD]")
    tk.save(str(path))
    return path


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return _tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.mark.parametrize("seq_len", [6, 16])
def test_ids_match_transformers_padding_and_truncation(tok, seq_len):
    transformers = pytest.importorskip("transformers")
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok), pad_token="[PAD]", unk_token="[UNK]")
    want = ref(TEXTS, padding="max_length", truncation=True, max_length=seq_len)["input_ids"]
    ds = TextDataset(TEXTS, [0, 1, 2, 0, 1], tok, seq_len)
    x, y = ds.read(np.arange(len(TEXTS)))
    assert x.dtype == np.int32 and x.shape == (5, seq_len)
    assert x.tolist() == want
    assert y.tolist() == [0, 1, 2, 0, 1] and ds.n_classes == 3 and ds.pad_id == 0
    assert x[3, :2].tolist() == [2, 3]                                 # an empty text is [CLS] [SEP] + padding
    assert ds.truncated == int(sum(len(ref(t)["input_ids"]) >= seq_len for t in TEXTS))


def test_padding_section_and_missing_pad_token(tmp_path):
    tk, pad = load_tokenizer(_tokenizer(tmp_path / "a.json", pad_section=True), 8)
    assert pad == 0 and len(tk.encode("the cat").ids) == 8                # seq_len wins over the file's 64
    from tokenizers import Tokenizer, models
    Tokenizer(models.WordPiece({"[UNK]": 0, "x": 1}, unk_token="[UNK]")).save(str(tmp_path / "nopad.json"))
    with pytest.raises(DataError, match="names no padding token"):
        load_tokenizer(tmp_path / "nopad.json", 8)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(DataError, match="not a readable tokenizer.json"):
        load_tokenizer(tmp_path / "junk.json", 8)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_files_with_named_and_integer_labels(tmp_path, tok, fmt):
    rows = [("the cat sat", "pets"), ("a dog, a dog", "dogs"), ("the mat", "pets"), ("dogs ran", "dogs")]
    f = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        f.write_text("\n".join(json.dumps({"sentence": t, "topic": y}) for t, y in rows) + "\n\n")
    else:
        sep = "," if fmt == "csv" else "\t"
        f.write_text(f"sentence{sep}topic\n" + "".join(f'"{t}"{sep}{y}\n' if sep == "," else f"{t}{sep}{y}\n"
                                                       for t, y in rows))
    data = {"dataset": f.name, "tokenizer": str(tok), "seq_len": 8, "text": "sentence", "target": "topic"}
    ds = load_dataset(None, data, tmp_path)
    assert isinstance(ds, TextDataset) and len(ds) == 4 and ds.classes == ("dogs", "pets")
    assert ds.targets().tolist() == [1, 0, 1, 0]
    assert ds.texts[1] == "a dog, a dog"
    info = dataset_info(f.name, data, base_dir=tmp_path)
    assert (info.n_rows, info.feature_shape, info.feature_dtype, info.n_classes, info.task) == \
        (4, (8,), "i32", 2, "classification")
    got = ds.info()                                     # the loaded dataset agrees with the spec's metadata
    assert (got.n_rows, got.feature_shape, got.feature_dtype, got.n_classes, got.task) == \
        (info.n_rows, info.feature_shape, info.feature_dtype, info.n_classes, info.task)
    f2 = tmp_path / "ints.csv"
    f2.write_text("text,label\nthe cat,2\na dog,0\n")
    ds2 = load_dataset(None, {"dataset": "ints.csv", "tokenizer": str(tok), "seq_len": 8}, tmp_path)
    assert ds2.targets().tolist() == [2, 0] and ds2.n_classes == 3 and ds2.classes is None


def test_content_hash_follows_texts_and_seq_len(tok):
    a = TextDataset(TEXTS, [0] * 5, tok, 8).content_hash()
    assert a == TextDataset(TEXTS, [0] * 5, tok, 8).content_hash()
    assert a != TextDataset(TEXTS, [0] * 5, tok, 9).content_hash()
    assert a != TextDataset(TEXTS[::-1], [0] * 5, tok, 8).content_hash()


def test_file_errors(tmp_path, tok):
    (tmp_path / "d.csv").write_text("sentence,label\nthe cat,1\n")
    with pytest.raises(DataError) as e:
        load_dataset(None, {"dataset": "d.csv", "tokenizer": str(tok)}, tmp_path)
    assert "no column 'text'" in e.value.diagnostic.message and "sentence" in e.value.diagnostic.hint
    (tmp_path / "e.csv").write_text("text,label\nthe cat,1,extra\n")
    with pytest.raises(DataError, match="3 fields, the header has 2"):
        load_dataset(None, {"dataset": "e.csv", "tokenizer": str(tok)}, tmp_path)
    (tmp_path / "f.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(DataError, match="needs fields 'text' and 'label'"):
        load_dataset(None, {"dataset": "f.jsonl", "tokenizer": str(tok)}, tmp_path)
    with pytest.raises(DataError, match="tokenizer 'nope.json' does not exist"):
        load_dataset(None, {"dataset": "d.csv", "tokenizer": "nope.json"}, tmp_path)
    with pytest.raises(DataError, match="labels must be integers >= 0"):
        TextDataset(["a"], [-1], tok, 4)


def test_pydoc_sentences_are_labelled_by_their_topic_group(tok):
    from pydoc_data.topics import topics
    texts, labels, classes = pydoc_sentences()
    assert classes == tuple(PYDOC_GROUPS) and len(texts) == len(labels) == len(set(texts)) > 1000
    flat = {g: " ".join(" ".join(topics.get(k, "").split()) for k in keys) for g, keys in PYDOC_GROUPS.items()}
    for i in range(0, len(texts), 37):                            # a spread sample, all four groups
        assert texts[i] in flat[classes[labels[i]]], texts[i]
    counts = np.bincount(labels)
    assert len(counts) == 4 and counts.min() > 0.15 * len(labels)   # no class is a sliver
    ds = pydoc_sentences_dataset(tok, 16, n_rows=40)
    assert len(ds) == 40 and np.bincount(ds.targets()).tolist() == [10] * 4
    info = dataset_info("pydoc_sentences", {"seq_len": 16, "n_rows": 40, "tokenizer": str(tok)})
    assert (info.n_rows, info.feature_shape, info.n_classes) == (40, (16,), 4)
    sp = split(ds, {"train": 0.5, "test": 0.5}, seed=0, stratify=True)
    assert np.bincount(ds.targets()[sp["train"]]).tolist() == [5] * 4


def _spec_text(data: str) -> str:
    return f"""name = "t"
[data]
{data}
[model]
nodes = [
  {{ name = "e", op = "bert_embeddings", vocab = {len(WORDS)}, dim = 8, max_len = 16 }},
  {{ name = "b", op = "bert_block", in = ["e", "x"], heads = 2 }},
  {{ name = "p", op = "masked_mean_pool", in = ["b", "x"] }},
  {{ op = "linear", out = 4 }},
]
[recipe]
batch_size = 4
determinism = "debug"
"""


def test_spec_with_text_data_plans_and_trains(tok):
    from scellis_jupyter.run.run import Run
    spec = Spec.from_text(_spec_text(f'dataset = "pydoc_sentences"\ntokenizer = "{tok}"\nseq_len = 12\n'
                                     f'n_rows = 40'))
    assert spec.input == {"shape": (12,), "dtype": "i32"} and spec.dataset.n_classes == 4
    run = Run(spec, device="reference", steps=2)
    losses = [s.loss for s in run]
    assert len(losses) == 2 and all(np.isfinite(losses))


@pytest.mark.parametrize("data,key,needle", [
    ('dataset = "pydoc_sentences"\nseq_len = 12', "[data]", "needs a tokenizer"),
    ('dataset = "pydoc_sentences"\ntokenizer = "missing.json"', "tokenizer =",
     "tokenizer 'missing.json' does not exist"),
    ('dataset = "digits"\ntokenizer = "x.json"', "tokenizer =", "dataset 'digits' is not text"),
    ('dataset = "pydoc_sentences"\ntokenizer = "TOK"\nn_rows = 100000', "dataset =", "asks 25000 rows of class 0"),
    ('dataset = "digits"\ntext = "sentence"', "text =", "has no tokenizer"),
    ('dataset = "pydoc_sentences"\ntokenizer = "TOK"\ntokeniser = "x"', "tokeniser", "did you mean 'tokenizer'"),
])
def test_spec_errors(tok, data, key, needle):
    text = _spec_text(data.replace("TOK", str(tok)))
    with pytest.raises(SpecError) as e:
        Spec.from_text(text, source="s.toml")
    d = e.value.diagnostic
    assert needle in d.message + " " + d.hint, d.message
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(key))
    assert e.value.where.startswith(f"s.toml:{line}:"), (e.value.where, line)


def test_a_fifo_text_dataset_is_refused_not_opened(tmp_path, tok):
    fifo = make_fifo(tmp_path / "p.csv")
    err = call_beside_fifo(lambda: text_file_dataset(fifo, tok), fifo)
    assert isinstance(err, DataError) and "FIFO" in err.diagnostic.message, err
    assert err.diagnostic.where == str(fifo)
