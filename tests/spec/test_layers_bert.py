"""BERT layers (bert_embeddings, bert_block, masked_mean_pool, l2_normalize) against Hugging Face BertModel
in float64, forward and gradients, with padded batches; padding invariance; spec-time errors.

Reference: transformers' BertModel (eager attention, dropout 0) with a small random config, whose weights
are copied into our parameters by name; mean pooling and normalisation written out in torch, as
sentence-transformers defines them (sum over attention_mask / clamp(count, 1e-9), F.normalize).
Tolerances: float64 on both sides, 1e-10 relative to the largest value.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import scellis_jupyter as sc
from scellis_jupyter.tensor import Tensor
from scellis_jupyter.spec import Spec, SpecError, build_graph

transformers = pytest.importorskip("transformers")

REF = sc.device("reference")
V, D, H, HID, MAXLEN, L = 50, 16, 4, 24, 20, 9
PAD = 0


def _spec(seq_len: int = L, pool: bool = True) -> Spec:
    tail = """
  { name = "pool", op = "masked_mean_pool", in = ["l1", "x"] },
  { name = "norm", op = "l2_normalize" },""" if pool else ""
    return Spec.from_text(f"""
[model]
input = {{ shape = [{seq_len}], dtype = "i32" }}
nodes = [
  {{ name = "emb", op = "bert_embeddings", vocab = {V}, dim = {D}, max_len = {MAXLEN} }},
  {{ name = "l0", op = "bert_block", in = ["emb", "x"], heads = {H}, hidden = {HID} }},
  {{ name = "l1", op = "bert_block", in = ["l0", "x"], heads = {H}, hidden = {HID} }},{tail}
]
output = "{'norm' if pool else 'l1'}"
""")


@pytest.fixture(scope="module")
def bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=2, num_attention_heads=H,
                                  intermediate_size=HID, max_position_embeddings=MAXLEN, type_vocab_size=2,
                                  layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  hidden_act="gelu", pad_token_id=PAD, attn_implementation="eager")
    m = transformers.BertModel(cfg, add_pooling_layer=False).double().eval()
    with torch.no_grad():     # LayerNorm scales/biases away from 1/0, so a mixed-up norm parameter shows
        for n, p in m.named_parameters():
            if "LayerNorm" in n:
                p.add_(0.3 * torch.randn_like(p))
    return m


def _ours_to_theirs(name: str) -> str:
    head, _, rest = name.partition(".")
    return {"emb": "embeddings"}.get(head, f"encoder.layer.{head[1:]}") + "." + rest


def _ids(r: np.random.Generator, lengths) -> np.ndarray:
    ids = np.full((len(lengths), L), PAD, np.int32)
    for i, n in enumerate(lengths):
        ids[i, :n] = r.integers(1, V, n)
    return ids


def _ours(graph, state, ids, grad_out=None, dev=REF, dtype="f64"):
    leaves = {p.name: sc.tensor(state[_ours_to_theirs(p.name)].detach().numpy(), dtype=dtype, device=dev,
                                requires_grad=grad_out is not None) for p in graph.params}
    x = sc.tensor(ids, dtype="i32", device=dev)
    out = Tensor._from_node(graph.forward(x.node, {k: t.node for k, t in leaves.items()}), dev)
    if grad_out is None:
        return out.numpy(), None
    out.backward(sc.tensor(grad_out, dtype=dtype, device=dev))
    return out.numpy(), {k: t.grad.numpy() for k, t in leaves.items()}


def _theirs(model, ids, pool: bool):
    mask = torch.tensor(ids != PAD, dtype=torch.long)
    h = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=mask).last_hidden_state
    if not pool:
        return h
    m = mask.unsqueeze(-1).to(h.dtype)
    pooled = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


def _close(a, b, tol=1e-10, scale=None):
    """max |a - b| below tol x the largest |b| (or x `scale`, for values that are zero up to rounding)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    err = np.max(np.abs(a - b)) / (scale if scale is not None else max(np.max(np.abs(b)), 1e-30))
    assert err < tol, err


@pytest.mark.parametrize("pool", [False, True])
def test_forward_and_gradients_match_hf_bert(bert, pool):
    r = np.random.default_rng(1)
    ids = _ids(r, [L, 5, 1, 7])                       # full, padded, a lone token, padded
    graph = _spec(pool=pool).graph
    state = {k: v for k, v in bert.state_dict().items() if k in {_ours_to_theirs(p.name) for p in graph.params}}
    assert len(state) == len(graph.params)          # every parameter has its BERT counterpart, one to one
    g = r.standard_normal((4, D) if pool else (4, L, D))
    if not pool:
        g = g * (ids != PAD)[..., None]              # padded rows' outputs are not compared (they differ by design)
    out, grads = _ours(graph, state, ids, g)
    bert.zero_grad()
    ref = _theirs(bert, ids, pool)
    (ref * torch.tensor(g)).sum().backward()
    valid = (ids != PAD)[..., None] if not pool else np.ones((4, 1), bool)
    _close(out * valid, ref.detach().numpy() * valid)
    params = dict(bert.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in params.values() if p.grad is not None)
    for name, gr in grads.items():              # (the key bias has no effect on softmax: its gradient is ~0)
        tg = params[_ours_to_theirs(name)].grad
        _close(gr, np.zeros_like(gr) if tg is None else tg.numpy(), 1e-10, scale)


@pytest.mark.slow
def test_wgpu_forward_and_gradients_match_reference(bert):
    """f32 on Mesa llvmpipe vs the reference path: the masked attention kernels forward and backward, the
    embedding gather's scatter-add gradient, the masked pooling; tolerance 1e-5 of the largest value."""
    r = np.random.default_rng(4)
    ids = _ids(r, [L, 3, 6])
    graph = _spec().graph
    g = r.standard_normal((3, D))
    a, ga = _ours(graph, bert.state_dict(), ids, g, sc.device("wgpu"), "f32")
    b, gb = _ours(graph, bert.state_dict(), ids, g, REF, "f32")
    _close(a, b, 1e-5)
    scale = max(float(np.max(np.abs(v))) for v in gb.values())
    for k in ga:
        _close(ga[k], gb[k], 1e-5, scale)


def test_padding_does_not_change_the_embedding(bert):
    """The same tokens padded to 9 and unpadded (seq_len = their length) embed identically."""
    r = np.random.default_rng(2)
    ids = _ids(r, [4, 6])
    long, _ = _ours(_spec(L).graph, bert.state_dict(), ids)
    for i, n in enumerate([4, 6]):
        short, _ = _ours(_spec(n).graph, bert.state_dict(), ids[i:i + 1, :n])
        np.testing.assert_allclose(long[i], short[0], rtol=0, atol=1e-12)
    # and without the ids as second input the padding is attended to: the test can fail
    nomask = Spec.from_text(f"""
[model]
input = {{ shape = [{L}], dtype = "i32" }}
nodes = [
  {{ name = "emb", op = "bert_embeddings", vocab = {V}, dim = {D}, max_len = {MAXLEN} }},
  {{ name = "l0", op = "bert_block", heads = {H}, hidden = {HID} }},
  {{ name = "l1", op = "bert_block", heads = {H}, hidden = {HID} }},
  {{ name = "pool", op = "masked_mean_pool", in = ["l1", "x"] }},
  {{ name = "norm", op = "l2_normalize" }},
]""").graph
    unmasked, _ = _ours(nomask, bert.state_dict(), ids)
    assert np.max(np.abs(unmasked[0] - long[0])) > 1e-3


def test_l2_normalize_and_plain_mean_match_torch():
    r = np.random.default_rng(3)
    x = r.standard_normal((3, 5, 6))
    x[1] = 0.0                                          # a zero vector: eps keeps it 0, like F.normalize
    spec = Spec.from_text("""
[model]
input = { shape = [5, 6] }
nodes = [{ op = "l2_normalize", axis = 0 }, { op = "masked_mean_pool" }]""")
    graph = build_graph(spec.model, (5, 6), "f64")     # the same nodes on a float64 input
    out = Tensor._from_node(graph.forward(sc.tensor(x, dtype="f64", device=REF).node, {}), REF).numpy()
    want = torch.nn.functional.normalize(torch.tensor(x), p=2, dim=1, eps=1e-12).mean(1).numpy()
    _close(out, want, 1e-13)


@pytest.mark.parametrize("nodes,needle", [
    ('{ op = "bert_embeddings", vocab = 10, dim = 8 }', "integer token ids"),
    ('{ op = "linear", out = 8 }, { op = "bert_block", heads = 3 }', "not divisible by heads=3"),
    ('{ op = "linear", out = 8 }, { op = "bert_block", heads = 2, in = ["0.linear", "0.linear"] }', "token ids"),
    ('{ op = "linear", out = 8 }, { op = "masked_mean_pool", in = ["0.linear", "x"] }', "integer token ids"),
    ('{ op = "bert_embeddingz", vocab = 10, dim = 8 }', "did you mean 'bert_embeddings'"),
    ('{ op = "bert_block", heads = 2, pad_id = -1 }', "pad_id"),
])
def test_spec_errors_point_at_the_node(nodes, needle):
    text = f'[model]\ninput = {{ shape = [6, 4] }}\nnodes = [\n  {nodes},\n]\n'
    with pytest.raises(SpecError) as e:
        Spec.from_text(text, source="m.toml")
    msg = e.value.diagnostic.message + " " + e.value.diagnostic.hint
    assert needle in msg, msg
    assert e.value.where.startswith("m.toml:4:"), e.value.where


def test_ids_longer_than_max_len_and_wrong_length_ids():
    with pytest.raises(SpecError, match="exceeds max_len 4"):
        Spec.from_text('[model]\ninput = { shape = [6], dtype = "i32" }\n'
                       'nodes = [{ op = "bert_embeddings", vocab = 10, dim = 8, max_len = 4 }]')
    spec = Spec.from_text('[model]\ninput = { shape = [6], dtype = "i32" }\nnodes = [\n'
                          '  { name = "e", op = "bert_embeddings", vocab = 10, dim = 8 },\n'
                          '  { op = "bert_block", heads = 2, in = ["e", "x"] },\n]')
    assert spec.graph.output_shape == (6, 8)
    names = [p.name for p in spec.graph.params]
    assert "1.bert_block.attention.self.query.weight" in names and "e.LayerNorm.bias" in names
