"""Model graphs from specs: parameter declarations, shapes, and forward passes on the reference backend
checked against PyTorch CPU in float64 with the same weights."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import scellis_jupyter as sc
from scellis_jupyter.errors import GraphError, ShapeError
from scellis_jupyter.tensor import Tensor
from scellis_jupyter.rng import Generator
from scellis_jupyter.rng.philox import bits_to_uniform, stream_bits, stream_key
from scellis_jupyter.spec import LAYERS, ModelSpec, Spec, SpecError, build_graph

from fixtures import spec_text

REF = sc.device("reference")
R = np.random.default_rng(7)

MLP = spec_text("digits_mlp")

CNN = '''[data]
dataset = "digits"
[model]
nodes = [
  { op = "reshape", shape = [1, 8, 8] },
  { name = "conv", op = "conv2d", out = 8, kernel = 3 },
  { op = "relu" },
  { op = "max_pool2d", kernel = 2 },
  { op = "flatten" },
  { name = "logits", op = "linear", out = 10 },
]
'''

TRANSFORMER = '''[model]
input = { shape = [12], dtype = "i32" }
nodes = [
  { name = "tok", op = "embedding", vocab = 40, dim = 16 },
  { name = "pos", op = "positional_embedding", max_len = 32 },
  { name = "b1", op = "transformer_block", heads = 4, causal = true },
  { name = "b2", op = "transformer_block", heads = 2, mlp_ratio = 2 },
  { op = "mean_pool" },
  { name = "head", op = "linear", out = 5 },
]
'''

RESIDUAL = '''[model]
input = { shape = [16] }
output = "out"
nodes = [
  { name = "out", op = "linear", out = 3, in = "h2" },   # a later node as input: order is resolved
  { name = "h1", op = "linear", out = 16, in = "x" },
  { name = "a", op = "tanh" },
  { name = "h2", op = "add", in = ["a", "x"] },
  { name = "side", op = "sigmoid", in = "input" },       # not on the path to the output
]
'''


def weights(graph, scale=0.3):
    return {p.name: R.standard_normal(p.shape) * scale for p in graph.params}


def as_nodes(ws):
    return {k: sc.tensor(v, dtype="f64", device=REF).node for k, v in ws.items()}


def run(graph, x, ws, dtype="f64", **kw):
    xt = sc.tensor(x, dtype=dtype, device=REF)
    out = graph.forward(xt.node, as_nodes(ws), **kw)
    return Tensor._from_node(out, REF).numpy()


def T(a):
    return torch.tensor(a, dtype=torch.float64)


# ---- the digits MLP ---------------------------------------------------------------------------------------
def test_mlp_params_and_count():
    g = Spec.from_text(MLP).graph
    assert [(p.name, p.shape, p.role) for p in g.params] == [
        ("0.linear.weight", (128, 64), "weight"), ("0.linear.bias", (128,), "bias"),
        ("logits.weight", (10, 128), "weight"), ("logits.bias", (10,), "bias")]
    assert g.params[0].init == "kaiming_normal" and g.params[2].init == "kaiming_uniform"
    assert (g.params[0].fan_in, g.params[0].fan_out) == (64, 128)
    assert g.param_count == 64 * 128 + 128 + 128 * 10 + 10
    assert g.param_bytes() == 4 * g.param_count and g.param_bytes("f16") == 2 * g.param_count
    assert g.output_shape == (10,) and g.output_dtype == "f32"
    assert g.shapes == {"0.linear": (128,), "1.relu": (128,), "2.dropout": (128,), "logits": (10,)}
    s = g.summary()
    assert "logits" in s and "1,290" in s and f"total: {g.param_count:,} parameters" in s


def test_mlp_forward_matches_torch():
    spec = Spec.from_text(MLP)
    g = build_graph(spec.model, (64,), "f64")
    ws = weights(g)
    x = R.standard_normal((9, 64))
    y = run(g, x, ws)
    ref = TF.linear(TF.relu(TF.linear(T(x), T(ws["0.linear.weight"]), T(ws["0.linear.bias"]))),
                    T(ws["logits.weight"]), T(ws["logits.bias"])).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)


def test_dropout_masks_per_node_are_philox_and_distinct():
    m = ModelSpec.from_list([{"op": "dropout", "p": 0.25}, {"op": "dropout", "p": 0.25}])
    g = build_graph(m, (256,), "f64")
    x = np.ones((4, 256))
    np.testing.assert_array_equal(run(g, x, {}), x)                     # eval: identity
    with pytest.raises(GraphError, match="dropout"):
        run(g, x, {}, training=True)
    gen = Generator(5)
    y = run(g, x, {}, training=True, gen_factory=gen.stream)
    assert set(gen.positions) == {"dropout/0.dropout", "dropout/1.dropout"}
    # independent host-side recomputation of both masks from the Philox streams
    u0 = bits_to_uniform(stream_bits(stream_key(5, "dropout/0.dropout"), 0, x.size)).reshape(x.shape)
    u1 = bits_to_uniform(stream_bits(stream_key(5, "dropout/1.dropout"), 0, x.size)).reshape(x.shape)
    want = np.where(u0 >= 0.25, 1 / 0.75, 0.0)
    want = np.where(u1 >= 0.25, want / 0.75, 0.0)
    np.testing.assert_allclose(y, want, rtol=1e-12)
    assert not np.array_equal(u0 >= 0.25, u1 >= 0.25)
    assert 0.15 < np.mean(u0 < 0.25) < 0.35
    # the next step continues the streams: new masks
    y2 = run(g, x, {}, training=True, gen_factory=gen.stream)
    assert not np.array_equal(y, y2)
    assert np.array_equal(y, run(g, x, {}, training=True, gen_factory=Generator(5).stream))


# ---- CNN --------------------------------------------------------------------------------------------------
def test_cnn_shapes_and_forward_match_torch():
    spec = Spec.from_text(CNN)
    g = spec.graph
    assert g.shapes == {"0.reshape": (1, 8, 8), "conv": (8, 6, 6), "2.relu": (8, 6, 6), "3.max_pool2d": (8, 3, 3),
                        "4.flatten": (72,), "logits": (10,)}
    assert g.param_shapes == {"conv.weight": (8, 1, 3, 3), "conv.bias": (8,), "logits.weight": (10, 72),
                              "logits.bias": (10,)}
    assert g.params[0].fan_in == 9 and g.params[0].fan_out == 72
    g = build_graph(spec.model, (64,), "f64")
    ws = weights(g)
    x = R.standard_normal((3, 64))
    y = run(g, x, ws)
    t = TF.conv2d(T(x).reshape(3, 1, 8, 8), T(ws["conv.weight"]), T(ws["conv.bias"]))
    t = TF.max_pool2d(TF.relu(t), 2).reshape(3, -1)
    ref = TF.linear(t, T(ws["logits.weight"]), T(ws["logits.bias"])).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)


# ---- transformer ------------------------------------------------------------------------------------------
def _torch_block(x, W, p, heads, causal, eps=1e-5):
    B, L, D = x.shape

    def lin(t, q):
        return TF.linear(t, T(W[q + "weight"]), T(W[q + "bias"]))

    def ln(t, q):
        return TF.layer_norm(t, (D,), T(W[q + "weight"]), T(W[q + "bias"]), eps)

    h = ln(x, p + "ln1.")
    q, k, v = (lin(h, f"{p}attn.{n}.").view(B, L, heads, D // heads).transpose(1, 2) for n in "qkv")
    a = TF.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(B, L, D)
    x = x + lin(a, p + "attn.o.")
    return x + lin(TF.gelu(lin(ln(x, p + "ln2."), p + "mlp.fc1.")), p + "mlp.fc2.")


def test_transformer_shapes_params_and_forward_match_torch():
    spec = Spec.from_text(TRANSFORMER)
    g = spec.graph
    assert g.shapes == {"tok": (12, 16), "pos": (12, 16), "b1": (12, 16), "b2": (12, 16), "4.mean_pool": (16,),
                        "head": (5,)}
    D = 16

    def block(h):
        return 2 * D + 4 * (D * D + D) + 2 * D + (D * h + h) + (h * D + D)
    assert g.param_count == 40 * D + 32 * D + block(64) + block(32) + D * 5 + 5
    assert g.param_shapes["b2.mlp.fc1.weight"] == (32, 16) and g.param_shapes["b1.attn.q.weight"] == (16, 16)
    assert {p.role for p in g.params if p.name.startswith("b1.ln")} == {"norm"}
    assert g.param_shapes["pos.weight"] == (32, 16)
    ws = weights(g)
    tokens = R.integers(0, 40, (2, 12))
    xt = sc.tensor(tokens, dtype="i32", device=REF)
    y = Tensor._from_node(g.forward(xt.node, as_nodes(ws)), REF).numpy()
    h = T(ws["tok.weight"])[torch.tensor(tokens)] + T(ws["pos.weight"])[:12]
    h = _torch_block(h, ws, "b1.", 4, True)
    h = _torch_block(h, ws, "b2.", 2, False)
    ref = TF.linear(h.mean(1), T(ws["head.weight"]), T(ws["head.bias"])).numpy()
    assert y.shape == (2, 5)
    np.testing.assert_allclose(y, ref, rtol=1e-9, atol=1e-11)


def test_transformer_block_dropout_uses_two_sub_streams():
    m = ModelSpec.from_list([{"op": "transformer_block", "heads": 2, "dropout": 0.5, "name": "blk"}])
    g = build_graph(m, (4, 8), "f64")
    gen = Generator(1)
    run(g, R.standard_normal((2, 4, 8)), weights(g), training=True, gen_factory=gen.stream)
    assert set(gen.positions) == {"dropout/blk.attn", "dropout/blk.mlp"}


def _torch_block_dropped(x, W, p, heads, keep):
    """_torch_block (not causal) with the attention probabilities times `keep` [B, H, L, L] before v."""
    B, L, D = x.shape

    def lin(t, q):
        return TF.linear(t, T(W[q + "weight"]), T(W[q + "bias"]))

    def ln(t, q):
        return TF.layer_norm(t, (D,), T(W[q + "weight"]), T(W[q + "bias"]), 1e-5)

    h = ln(x, p + "ln1.")
    q, k, v = (lin(h, f"{p}attn.{n}.").view(B, L, heads, D // heads).transpose(1, 2) for n in "qkv")
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // heads), -1)
    a = ((probs * T(keep)) @ v).transpose(1, 2).reshape(B, L, D)
    x = x + lin(a, p + "attn.o.")
    return x + lin(TF.gelu(lin(ln(x, p + "ln2."), p + "mlp.fc1.")), p + "mlp.fc2.")


def test_attn_dropout_drops_attention_probabilities_from_the_nodes_stream():
    """attn_dropout (transformer_block, attention, bert_block): in training the attention probabilities are
    multiplied by keep factors from the node's sub-stream `dropout/<node>.attn_probs` (numpy Philox, word
    (head * L + i) * L + j), checked against torch on the CPU with that mask; eval ignores it; every step
    draws the next words of the stream."""
    B, L, D, H, p = 2, 5, 8, 2, 0.3
    m = ModelSpec.from_list([{"op": "transformer_block", "heads": H, "attn_dropout": p, "name": "blk"}])
    g = build_graph(m, (L, D), "f64")
    ws, x = weights(g), R.standard_normal((B, L, D))
    plain = build_graph(ModelSpec.from_list([{"op": "transformer_block", "heads": H, "name": "blk"}]), (L, D), "f64")
    np.testing.assert_allclose(run(g, x, ws), run(plain, x, ws), rtol=0, atol=0)     # eval: no dropout
    gen = Generator(9)
    y = run(g, x, ws, training=True, gen_factory=gen.stream)
    assert set(gen.positions) == {"dropout/blk.attn_probs"} and gen.positions["dropout/blk.attn_probs"] == B * H * L * L
    u = bits_to_uniform(stream_bits(stream_key(9, "dropout/blk.attn_probs"), 0, B * H * L * L)).reshape(B, H, L, L)
    keep = np.where(u >= np.float32(p), np.float64(np.float32(1.0 / (1.0 - p))), 0.0)   # the factor is f32's
    assert 0 < (keep == 0).sum() < keep.size
    np.testing.assert_allclose(y, _torch_block_dropped(T(x), ws, "blk.", H, keep).numpy(), rtol=1e-9, atol=1e-11)
    y2 = run(g, x, ws, training=True, gen_factory=gen.stream)                      # the next step: a new mask
    assert not np.allclose(y, y2)
    for spec in ({"op": "attention", "heads": H, "attn_dropout": p, "name": "att"},
                 {"op": "bert_block", "heads": H, "attn_dropout": p, "name": "att"}):
        gen = Generator(9)
        one = build_graph(ModelSpec.from_list([spec]), (L, D), "f64")
        run(one, x, weights(one), training=True, gen_factory=gen.stream)
        assert set(gen.positions) == {"dropout/att.attn_probs"}, spec["op"]
    with pytest.raises(SpecError, match="attn_dropout"):
        ModelSpec.from_list([{"op": "transformer_block", "heads": H, "attn_dropout": 1.0}])


# ---- residual graph with `in` -----------------------------------------------------------------------------
def test_residual_graph_with_in():
    spec = Spec.from_text(RESIDUAL)
    g = build_graph(spec.model, (16,), "f64")
    keys = [spec.model.nodes[i].key for i in g.order]
    assert keys.index("h1") < keys.index("a") < keys.index("h2") < keys.index("out")
    assert g.output_shape == (3,) and spec.model.nodes[g.output].key == "out"
    assert g._needed() == {0, 1, 2, 3}
    ws = weights(g)
    x = R.standard_normal((5, 16))
    y = run(g, x, ws)
    h = np.tanh(x @ ws["h1.weight"].T + ws["h1.bias"]) + x
    np.testing.assert_allclose(y, h @ ws["out.weight"].T + ws["out.bias"], rtol=1e-10, atol=1e-12)


# ---- every layer against torch ----------------------------------------------------------------------------
def _lin(x, W, p=""):
    return TF.linear(x, T(W[p + "weight"]), T(W[p + "bias"]) if p + "bias" in W else None)


LAYER_CASES = [
    ("gelu", {"op": "gelu"}, (6,), lambda x, W: TF.gelu(x)),
    ("gelu-tanh", {"op": "gelu", "approximate": "tanh"}, (6,), lambda x, W: TF.gelu(x, approximate="tanh")),
    ("silu", {"op": "silu"}, (6,), lambda x, W: TF.silu(x)),
    ("sigmoid", {"op": "sigmoid"}, (3, 2), lambda x, W: torch.sigmoid(x)),
    ("softmax-axis0", {"op": "softmax", "axis": 0}, (3, 4), lambda x, W: torch.softmax(x, 1)),
    ("layer_norm", {"op": "layer_norm", "eps": 1e-3}, (5, 6),
     lambda x, W: TF.layer_norm(x, (6,), T(W["weight"]), T(W["bias"]), 1e-3)),
    ("rms_norm", {"op": "rms_norm"}, (6,), lambda x, W: TF.rms_norm(x, (6,), T(W["weight"]), 1e-6)),
    ("linear-nobias", {"op": "linear", "out": 3, "bias": False}, (4, 5), lambda x, W: _lin(x, W)),
    ("conv2d-stride-pad", {"op": "conv2d", "out": 4, "kernel": [3, 2], "stride": 2, "padding": 1}, (2, 7, 6),
     lambda x, W: TF.conv2d(x, T(W["weight"]), T(W["bias"]), stride=2, padding=1)),
    ("avg_pool2d", {"op": "avg_pool2d", "kernel": 3, "stride": 2, "padding": 1}, (2, 7, 7),
     lambda x, W: TF.avg_pool2d(x, 3, 2, 1)),
    ("max_pool2d-stride", {"op": "max_pool2d", "kernel": 2, "stride": 1}, (1, 4, 5),
     lambda x, W: TF.max_pool2d(x, 2, 1)),
    ("flatten", {"op": "flatten"}, (2, 3, 4), lambda x, W: x.reshape(x.shape[0], -1)),
    ("reshape", {"op": "reshape", "shape": [4, -1]}, (2, 6), lambda x, W: x.reshape(x.shape[0], 4, 3)),
    ("mean_pool", {"op": "mean_pool"}, (5, 3), lambda x, W: x.mean(1)),
    ("last_token", {"op": "last_token"}, (5, 3), lambda x, W: x[:, -1]),
    ("attention", {"op": "attention", "heads": 2}, (5, 4),
     lambda x, W: _lin(TF.scaled_dot_product_attention(
         *(_lin(x, W, f"{n}.").view(x.shape[0], 5, 2, 2).transpose(1, 2) for n in "qkv"))
         .transpose(1, 2).reshape(x.shape[0], 5, 4), W, "o.")),
]


@pytest.mark.parametrize("name,node,shape,ref", LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_layer_matches_torch(name, node, shape, ref):
    g = build_graph(ModelSpec.from_list([node]), shape, "f64")
    ws = weights(g, 1.0)
    x = R.standard_normal((3,) + shape)
    y = run(g, x, ws)
    want = ref(T(x), {k.split(".", 2)[-1]: v for k, v in ws.items()}).numpy()
    assert g.output_shape == want.shape[1:]
    np.testing.assert_allclose(y, want, rtol=1e-9, atol=1e-11)


def test_concat_and_add_of_many():
    m = ModelSpec.from_list([{"name": "a", "op": "tanh", "in": "x"}, {"name": "c", "op": "concat", "axis": 0,
                                                                     "in": ["x", "a", "x"]},
                             {"op": "add", "in": ["c", "c", "c"]}])
    g = build_graph(m, (2, 3), "f64")
    assert g.output_shape == (6, 3)
    x = R.standard_normal((4, 2, 3))
    np.testing.assert_allclose(run(g, x, {}), 3 * np.concatenate([x, np.tanh(x), x], 1), rtol=1e-12)


def test_layer_registry_declares_the_required_layers():
    need = {"linear", "relu", "gelu", "silu", "tanh", "sigmoid", "dropout", "layer_norm", "rms_norm", "embedding",
            "conv2d", "max_pool2d", "avg_pool2d", "flatten", "reshape", "add", "concat", "softmax", "attention",
            "transformer_block", "mean_pool", "positional_embedding"}
    assert need <= set(LAYERS)
    assert LAYERS["linear"].attrs["init"].default == "kaiming_uniform"
    assert LAYERS["transformer_block"].attrs["mlp_ratio"].default == 4.0
    assert LAYERS["add"].arity == (2, None)


# ---- errors -----------------------------------------------------------------------------------------------
def test_python_api_errors():
    with pytest.raises(SpecError, match="did you mean 'linear'"):
        ModelSpec.from_list([{"op": "linaer", "out": 3}])
    with pytest.raises(SpecError, match="must be in"):
        ModelSpec.from_list([{"op": "dropout", "p": 1.0}])
    with pytest.raises(SpecError, match="needs attr 'out'"):
        ModelSpec.from_list([{"op": "linear"}])
    with pytest.raises(SpecError, match="'in' must be"):
        ModelSpec.from_list([{"op": "relu", "in": 3}])
    with pytest.raises(SpecError, match="must start with a letter"):
        ModelSpec.from_list([{"op": "relu", "name": "a.b"}])
    with pytest.raises(SpecError, match="duplicate node name 'a'"):
        build_graph(ModelSpec.from_list([{"op": "relu", "name": "a"}, {"op": "relu", "name": "a"}]), (3,))
    with pytest.raises(SpecError, match="takes at least 2 input"):
        build_graph(ModelSpec.from_list([{"op": "add"}]), (3,))
    with pytest.raises(SpecError, match="not divisible by heads=3"):
        build_graph(ModelSpec.from_list([{"op": "attention", "heads": 3}]), (4, 8))
    with pytest.raises(SpecError, match="exceeds max_len 4"):
        build_graph(ModelSpec.from_list([{"op": "positional_embedding", "max_len": 4}]), (5, 8))
    with pytest.raises(SpecError, match=r"cannot reshape \(6,\)"):
        build_graph(ModelSpec.from_list([{"op": "reshape", "shape": [4, -1]}]), (6,))
    with pytest.raises(SpecError, match="does not fit"):
        build_graph(ModelSpec.from_list([{"op": "conv2d", "out": 1, "kernel": 5}]), (1, 3, 3))
    with pytest.raises(SpecError, match=r"node 'c' \(op 'concat'"):
        build_graph(ModelSpec.from_list([{"op": "concat", "name": "c", "in": ["x", "x"]}]), ())


def test_forward_checks_input_and_params():
    g = build_graph(ModelSpec.from_list([{"op": "linear", "out": 2}]), (3,), "f64")
    ws = weights(g)
    with pytest.raises(ShapeError, match=r"\[batch, 3\]"):
        run(g, np.zeros((2, 4)), ws)
    with pytest.raises(GraphError, match="f64"):
        run(g, np.zeros((2, 3)), ws, dtype="f32")
    with pytest.raises(GraphError, match="missing: 0.linear.bias"):
        run(g, np.zeros((2, 3)), {"0.linear.weight": ws["0.linear.weight"]})
    with pytest.raises(ShapeError, match="0.linear.weight"):
        run(g, np.zeros((2, 3)), {**ws, "0.linear.weight": np.zeros((3, 3))})
    assert math.prod(g.params[0].shape) == 6
