"""Loss entries against independent references, float64 on the reference device.

Every loss PyTorch has is compared with torch.nn.functional in float64: the value and the gradient with
respect to the prediction (for reduction 'none' a random cotangent), rtol 1e-10, on odd sizes, with
ignore_index, class weights and label smoothing where the loss takes them. Focal loss and InfoNCE are
compared with their papers' formulas written out here (numpy for the value, the same formula in torch
for the gradient). Then every loss on the wgpu backend (f32) against the reference backend (f32).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.catalog.losses import loss_value, make_loss, target_of
from scellis_jupyter.executor.executor import realize
from scellis_jupyter.graph.autodiff import grad
from scellis_jupyter.tensor import tensor

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RTOL, ATOL = 1e-10, 1e-12
REF = sc.device("reference")


def ours(cfg, pred, y, go=None, device=REF, dtype="f64"):
    """(value, d value / d pred) of our loss; for a non-scalar value the gradient is the VJP with `go`."""
    loss = make_loss(cfg)
    t = target_of(loss, pred.shape[1:])
    pn = tensor(pred, dtype=dtype, device=device).node
    ydt = t.dtype if t.dtype == "i32" else dtype
    yn = None if y is None else tensor(np.asarray(y), dtype=ydt, device=device).node
    v = loss_value(loss, pn, yn)
    if go is None:
        g, = grad([v], [pn])
    else:
        g, = grad([v], [pn], [tensor(go, dtype=dtype, device=device).node])
    a, b = realize([v, g], device.impl)
    return np.array(a.numpy()), np.array(b.numpy())


def theirs(fn, pred, *, go=None):
    """(value, gradient) of a torch function of the prediction, float64."""
    p = torch.tensor(pred, dtype=torch.float64, requires_grad=True)
    v = fn(p)
    v.backward(torch.ones_like(v) if go is None else torch.tensor(go, dtype=torch.float64))
    return v.detach().numpy(), p.grad.numpy()


def same(cfg, pred, y, fn, reduction=None):
    cfg = dict(cfg)
    if reduction is not None:
        cfg["reduction"] = reduction
    go = None
    if cfg.get("reduction") == "none":
        v0, _ = theirs(fn, pred)
        go = np.random.default_rng(99).standard_normal(v0.shape)
    v, g = ours(cfg, pred, y, go)
    tv, tg = theirs(fn, pred, go=go)
    np.testing.assert_allclose(v, tv, rtol=RTOL, atol=ATOL, err_msg=f"{cfg} value")
    np.testing.assert_allclose(g, tg, rtol=RTOL, atol=ATOL, err_msg=f"{cfg} gradient")


RNG = np.random.default_rng(0)
B = 7                                     # odd sizes throughout


def T(a):
    return torch.tensor(np.asarray(a))


REDS = ["mean", "sum", "none"]


# ---- regression losses --------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("name,hyper,fn", [
    ("mse", {}, lambda p, y, r: TF.mse_loss(p, y, reduction=r)),
    ("l1", {}, lambda p, y, r: TF.l1_loss(p, y, reduction=r)),
    ("smooth_l1", {}, lambda p, y, r: TF.smooth_l1_loss(p, y, reduction=r)),
    ("smooth_l1", {"beta": 0.3}, lambda p, y, r: TF.smooth_l1_loss(p, y, reduction=r, beta=0.3)),
    ("smooth_l1", {"beta": 0.0}, lambda p, y, r: TF.smooth_l1_loss(p, y, reduction=r, beta=0.0)),
    ("huber", {}, lambda p, y, r: TF.huber_loss(p, y, reduction=r)),
    ("huber", {"delta": 0.4}, lambda p, y, r: TF.huber_loss(p, y, reduction=r, delta=0.4)),
])
@pytest.mark.parametrize("shape", [(B, 3), (B, 2, 5), (B,)])
def test_regression_losses(name, hyper, fn, reduction, shape):
    pred = RNG.standard_normal(shape) * 1.5
    y = RNG.standard_normal(shape)
    same({"name": name, **hyper}, pred, y, lambda p: fn(p, T(y), reduction), reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"pos_weight": (0.5, 2.0, 3.0)}])
def test_bce_with_logits(hyper, reduction):
    pred = RNG.standard_normal((B, 3)) * 3.0
    y = RNG.uniform(0, 1, (B, 3))
    y[:3] = np.round(y[:3])
    pw = None if not hyper else T(np.array(hyper["pos_weight"]))
    same({"name": "bce_with_logits", **hyper}, pred, y,
         lambda p: TF.binary_cross_entropy_with_logits(p, T(y), pos_weight=pw, reduction=reduction), reduction)


@pytest.mark.parametrize("reduction", REDS)
def test_bce_on_probabilities(reduction):
    pred = RNG.uniform(0.03, 0.97, (B, 4))
    y = RNG.uniform(0, 1, (B, 4))
    same({"name": "bce"}, pred, y, lambda p: TF.binary_cross_entropy(p, T(y), reduction=reduction), reduction)


# ---- class losses -------------------------------------------------------------------------------------
def _labels(shape, c, ignore=None, n_ignored=0):
    y = RNG.integers(0, c, size=shape).astype(np.int32)
    if ignore is not None and n_ignored:
        flat = y.reshape(-1)
        flat[RNG.choice(flat.size, n_ignored, replace=False)] = ignore
    return y


CE_CASES = [
    {},
    {"label_smoothing": 0.1},
    {"weight": (0.3, 1.0, 2.0, 0.7, 1.5)},
    {"weight": (0.3, 1.0, 2.0, 0.7, 1.5), "label_smoothing": 0.25},
    {"ignore_index": 2, "n_ignored": 2},
    {"ignore_index": -100, "n_ignored": 3, "weight": (1.0, 2.0, 0.5, 0.5, 3.0), "label_smoothing": 0.2},
    {"label_smoothing": 1.0},
]


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("case", CE_CASES, ids=lambda c: ",".join(c) or "plain")
@pytest.mark.parametrize("extra", [(), (3,)], ids=["[B,C]", "[B,3,C]"])
def test_cross_entropy(case, reduction, extra):
    c = 5
    hyper = {k: v for k, v in case.items() if k != "n_ignored"}
    pred = RNG.standard_normal((B,) + extra + (c,)) * 2.0
    y = _labels((B,) + extra, c, hyper.get("ignore_index", -100), case.get("n_ignored", 0))
    w = T(np.array(hyper["weight"])) if "weight" in hyper else None

    def fn(p):
        return TF.cross_entropy(p.movedim(-1, 1), T(y).long(), weight=w, ignore_index=hyper.get("ignore_index", -100),
                                label_smoothing=hyper.get("label_smoothing", 0.0), reduction=reduction)
    same({"name": "cross_entropy", **hyper}, pred, y, fn, reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("case", CE_CASES[:3] + CE_CASES[4:6], ids=lambda c: ",".join(c) or "plain")
def test_nll(case, reduction):
    c = 5
    hyper = {k: v for k, v in case.items() if k not in ("n_ignored", "label_smoothing")}
    z = RNG.standard_normal((B, c))
    pred = z - np.log(np.exp(z).sum(-1, keepdims=True))
    y = _labels((B,), c, hyper.get("ignore_index", -100), case.get("n_ignored", 0))
    w = T(np.array(hyper["weight"])) if "weight" in hyper else None
    same({"name": "nll", **hyper}, pred, y,
         lambda p: TF.nll_loss(p, T(y).long(), weight=w, ignore_index=hyper.get("ignore_index", -100),
                               reduction=reduction), reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"p": 2}, {"margin": 0.4}, {"weight": (0.5, 1.0, 2.0, 1.5)},
                                   {"p": 2, "margin": 2.0, "weight": (1.0, 0.2, 3.0, 1.0)}])
def test_multi_margin(hyper, reduction):
    c = 4
    pred = RNG.standard_normal((B, c))
    y = _labels((B,), c)
    w = T(np.array(hyper["weight"])) if "weight" in hyper else None
    same({"name": "multi_margin", **hyper}, pred, y,
         lambda p: TF.multi_margin_loss(p, T(y).long(), p=hyper.get("p", 1), margin=hyper.get("margin", 1.0),
                                        weight=w, reduction=reduction), reduction)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", REDS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(log_target, reduction):
    z = RNG.standard_normal((B, 5))
    pred = z - np.log(np.exp(z).sum(-1, keepdims=True))
    q = np.exp(RNG.standard_normal((B, 5)))
    q /= q.sum(-1, keepdims=True)
    q[0, 1] = 0.0                                    # a zero-probability class: y log y is 0 there
    q[0] /= q[0].sum()
    y = np.log(np.where(q > 0, q, 1e-300)) if log_target else q
    same({"name": "kl_div", "log_target": log_target}, pred, y,
         lambda p: TF.kl_div(p, T(y), reduction=reduction, log_target=log_target), reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"full": True}, {"log_input": False}, {"log_input": False, "full": True,
                                                                              "eps": 1e-3}])
def test_poisson_nll(hyper, reduction):
    shape = (B, 3)
    y = RNG.poisson(2.5, shape).astype(np.float64)
    pred = RNG.standard_normal(shape) if hyper.get("log_input", True) else np.exp(RNG.standard_normal(shape))
    same({"name": "poisson_nll", **hyper}, pred, y,
         lambda p: TF.poisson_nll_loss(p, T(y), log_input=hyper.get("log_input", True), full=hyper.get("full", False),
                                       eps=hyper.get("eps", 1e-8), reduction=reduction), reduction)


# ---- multi-input losses (the output carries the parts) ------------------------------------------------
@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"margin": 0.3, "p": 1.0}, {"swap": True, "p": 3.0, "eps": 1e-3},
                                   {"margin": 2.0}])
def test_triplet_margin(hyper, reduction):
    pred = RNG.standard_normal((B, 3, 5))
    same({"name": "triplet_margin", **hyper}, pred, None,
         lambda p: TF.triplet_margin_loss(p[:, 0], p[:, 1], p[:, 2], margin=hyper.get("margin", 1.0),
                                          p=hyper.get("p", 2.0), eps=hyper.get("eps", 1e-6),
                                          swap=hyper.get("swap", False), reduction=reduction), reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("margin", [0.0, 0.25, -0.3])
def test_cosine_embedding(margin, reduction):
    pred = RNG.standard_normal((B, 2, 5))
    y = np.where(RNG.integers(0, 2, B) == 1, 1.0, -1.0)
    same({"name": "cosine_embedding", "margin": margin}, pred, y,
         lambda p: TF.cosine_embedding_loss(p[:, 0], p[:, 1], T(y), margin=margin, reduction=reduction), reduction)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("margin", [0.0, 0.5])
@pytest.mark.parametrize("shape", [(B, 2), (B, 3, 2)])
def test_margin_ranking(margin, reduction, shape):
    pred = RNG.standard_normal(shape)
    y = np.where(RNG.integers(0, 2, shape[:-1]) == 1, 1.0, -1.0)
    same({"name": "margin_ranking", "margin": margin}, pred, y,
         lambda p: TF.margin_ranking_loss(p[..., 0], p[..., 1], T(y), margin=margin, reduction=reduction), reduction)


# ---- the papers' formulas -----------------------------------------------------------------------------
def focal_softmax_paper(z, y, gamma, alpha_per_class, xp):
    """Lin et al. (2017) eq. 5 with p_t the softmax probability of the true class and alpha_t per class."""
    e = xp.exp(z - z.max(-1, keepdims=True)[0] if xp is torch else z - z.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    pt = p[np.arange(len(y)), y]
    at = 1.0 if alpha_per_class is None else xp.asarray(alpha_per_class)[y] if xp is np else \
        torch.tensor(alpha_per_class, dtype=torch.float64)[torch.tensor(y).long()]
    return -at * (1 - pt) ** gamma * xp.log(pt)


def focal_sigmoid_paper(x, y, gamma, alpha, xp):
    """Lin et al. (2017) eq. 5 with p = sigmoid(x), p_t = p if y = 1 else 1 - p (soft y interpolates),
    alpha_t = alpha y + (1 - alpha)(1 - y); the log term is the binary cross-entropy."""
    p = 1 / (1 + xp.exp(-x))
    ce = -(y * xp.log(p) + (1 - y) * xp.log(1 - p))
    pt = p * y + (1 - p) * (1 - y)
    at = 1.0 if alpha is None else alpha * y + (1 - alpha) * (1 - y)
    return at * (1 - pt) ** gamma * ce


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"gamma": 0.5}, {"gamma": 0.0}, {"gamma": 3.0, "weight": (0.25, 1.0, 0.5, 2.0)}])
def test_focal_softmax_matches_the_paper(hyper, reduction):
    z = RNG.standard_normal((B, 4)) * 2
    y = _labels((B,), 4)
    g, w = hyper.get("gamma", 2.0), hyper.get("weight")
    per = focal_softmax_paper(z, y, g, w, np)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    go = RNG.standard_normal(B) if reduction == "none" else None
    v, grad_ours = ours({"name": "focal", **hyper, "reduction": reduction}, z, y, go)
    np.testing.assert_allclose(v, want, rtol=RTOL, atol=ATOL)
    red = {"mean": torch.mean, "sum": torch.sum, "none": lambda t: t}[reduction]
    _, tg = theirs(lambda p: red(focal_softmax_paper(p, y, g, w, torch)), z, go=go)
    np.testing.assert_allclose(grad_ours, tg, rtol=RTOL, atol=ATOL)
    if g == 0.0 and w is None:        # gamma = 0 is cross-entropy
        np.testing.assert_allclose(v, ours({"name": "cross_entropy", "reduction": reduction}, z, y, go)[0], rtol=RTOL)


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"alpha": 0.25}, {"alpha": 0.25, "gamma": 0.0}, {"gamma": 1.5, "alpha": 0.8}])
def test_focal_sigmoid_matches_the_paper(hyper, reduction):
    x = RNG.standard_normal((B, 3)) * 2
    y = RNG.integers(0, 2, (B, 3)).astype(np.float64)
    y[0, 0] = 0.3                                          # soft labels follow the same formula
    g, a = hyper.get("gamma", 2.0), hyper.get("alpha")
    per = focal_sigmoid_paper(x, y, g, a, np)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    go = RNG.standard_normal((B, 3)) if reduction == "none" else None
    v, grad_ours = ours({"name": "focal", "mode": "sigmoid", **hyper, "reduction": reduction}, x, y, go)
    np.testing.assert_allclose(v, want, rtol=RTOL, atol=ATOL)
    red = {"mean": torch.mean, "sum": torch.sum, "none": lambda t: t}[reduction]
    _, tg = theirs(lambda p: red(focal_sigmoid_paper(p, T(y), g, a, torch)), x, go=go)
    np.testing.assert_allclose(grad_ours, tg, rtol=RTOL, atol=ATOL)


def info_nce_paper(z, temperature, normalize, symmetric, xp):
    """van den Oord et al. (2018) eq. 4 with in-batch negatives: -log f(z_i, z'_i) / sum_j f(z_i, z'_j),
    f = exp(sim / tau); sim is the cosine (SimCLR) or the dot product; symmetric averages both ways."""
    a, b = z[:, 0], z[:, 1]
    if normalize:
        a = a / (a ** 2).sum(-1, keepdims=True) ** 0.5
        b = b / (b ** 2).sum(-1, keepdims=True) ** 0.5
    f = xp.exp(a @ b.T / temperature)
    n = len(z)
    row = -xp.log(f[np.arange(n), np.arange(n)] / f.sum(1))
    if not symmetric:
        return row
    col = -xp.log(f[np.arange(n), np.arange(n)] / f.sum(0))
    return (row + col) / 2


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("hyper", [{}, {"temperature": 0.5}, {"normalize": False, "temperature": 2.0},
                                   {"symmetric": True, "temperature": 0.07}])
def test_info_nce_matches_the_paper(hyper, reduction):
    z = RNG.standard_normal((B, 2, 6))
    z[:, 1] = z[:, 0] + 0.5 * RNG.standard_normal((B, 6))       # positives closer than negatives
    args = (hyper.get("temperature", 0.1), hyper.get("normalize", True), hyper.get("symmetric", False))
    per = info_nce_paper(z, *args, np)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    go = RNG.standard_normal(B) if reduction == "none" else None
    v, grad_ours = ours({"name": "info_nce", **hyper, "reduction": reduction}, z, None, go)
    np.testing.assert_allclose(v, want, rtol=RTOL, atol=ATOL)
    red = {"mean": torch.mean, "sum": torch.sum, "none": lambda t: t}[reduction]
    _, tg = theirs(lambda p: red(info_nce_paper(p, *args, torch)), z, go=go)
    np.testing.assert_allclose(grad_ours, tg, rtol=RTOL, atol=ATOL)
    # and the same as torch's cross-entropy over the similarity matrix with the diagonal as labels
    a = TF.normalize(T(z[:, 0]), dim=-1) if args[1] else T(z[:, 0])
    b = TF.normalize(T(z[:, 1]), dim=-1) if args[1] else T(z[:, 1])
    s = a @ b.T / args[0]
    ce = TF.cross_entropy(s, torch.arange(B), reduction="none")
    if args[2]:
        ce = (ce + TF.cross_entropy(s.T, torch.arange(B), reduction="none")) / 2
    np.testing.assert_allclose(per, ce.numpy(), rtol=RTOL, atol=ATOL)


def test_f16_predictions_reduce_in_f32():
    pred = RNG.standard_normal((B, 5)).astype(np.float16)
    y = _labels((B,), 5)
    v, _ = ours("cross_entropy", pred, y, dtype="f16")
    assert v.dtype == np.float32
    want = TF.cross_entropy(torch.tensor(pred.astype(np.float32)), T(y).long()).item()
    np.testing.assert_allclose(v, want, rtol=1e-6)


# ---- wgpu (f32) against the reference backend (f32) ---------------------------------------------------
def _wgpu():
    try:
        return sc.device("wgpu")
    except Exception as e:  # no adapter on this machine
        pytest.skip(f"no wgpu device: {e}")


WGPU_CASES = [
    ("mse", {}, (B, 3)), ("l1", {}, (B, 3)), ("smooth_l1", {"beta": 0.5}, (B, 3)), ("huber", {}, (B, 3)),
    ("bce", {}, (B, 3)), ("bce_with_logits", {"pos_weight": (2.0, 1.0, 0.5)}, (B, 3)),
    ("cross_entropy", {"label_smoothing": 0.1, "weight": (1.0, 2.0, 0.5, 1.0, 1.0), "ignore_index": 4}, (B, 3, 5)),
    ("nll", {"weight": (1.0, 2.0, 0.5, 1.0, 1.0)}, (B, 5)), ("kl_div", {}, (B, 5)),
    ("focal", {}, (B, 5)), ("focal", {"mode": "sigmoid", "alpha": 0.25}, (B, 3)),
    ("info_nce", {"symmetric": True}, (B, 2, 6)), ("triplet_margin", {"swap": True}, (B, 3, 6)),
    ("cosine_embedding", {"margin": 0.1}, (B, 2, 6)), ("margin_ranking", {"margin": 0.2}, (B, 2)),
    ("poisson_nll", {"full": True}, (B, 3)), ("multi_margin", {"p": 2}, (B, 5)),
]


def test_every_loss_has_a_wgpu_case():
    from scellis_jupyter import catalog
    assert {e["name"] for e in catalog.list("loss")} <= {c[0] for c in WGPU_CASES}


@pytest.mark.parametrize("name,hyper,shape", WGPU_CASES, ids=[f"{c[0]}{'+' if c[1] else ''}" for c in WGPU_CASES])
def test_wgpu_matches_reference(name, hyper, shape):
    """f32 on both backends: value and gradient within rtol 1e-5 (atol 1e-6 of the gradient's scale)."""
    wg = _wgpu()
    loss = make_loss({"name": name, **hyper})
    t = target_of(loss, shape[1:])
    rng = np.random.default_rng(5)
    inputs = getattr(loss, "inputs", "real")
    pred = rng.standard_normal(shape).astype(np.float32)
    if inputs == "prob":
        pred = (0.02 + 0.96 / (1 + np.exp(-pred))).astype(np.float32)
    elif inputs == "logprob":
        pred = (pred - np.log(np.exp(pred).sum(-1, keepdims=True))).astype(np.float32)
    y = t.example(rng, shape[0])
    if name == "cross_entropy":
        y.reshape(-1)[:2] = 4                               # some ignored labels
    vr, gr = ours({"name": name, **hyper}, pred, y, device=REF, dtype="f32")
    vw, gw = ours({"name": name, **hyper}, pred, y, device=wg, dtype="f32")
    np.testing.assert_allclose(vw, vr, rtol=1e-5, atol=1e-6, err_msg=f"{name} value")
    np.testing.assert_allclose(gw, gr, rtol=1e-5, atol=1e-6 * float(np.abs(gr).max()), err_msg=f"{name} gradient")
