"""Regularizer entries against their published definitions and PyTorch.

mixup and CutMix: lam's distribution (KS test against scipy's Beta), replayed draws, and one real
training step (mixed batch, mixed loss, updated weights) against the papers' definitions written out
here in torch (float64 reference, our step in f32: rtol 1e-5). Label smoothing: the regularizer gives
the same step as cross_entropy's own label_smoothing, and torch's value. Weight decay: L2 against
torch.optim.SGD / Adam's weight_decay and decoupled against AdamW, float64 over 6 steps (rtol 1e-10),
plus through a real training step with clipping (f32, rtol 1e-5). Spectral norm: the weight transform,
its gradient and the u, v buffers against torch.nn.utils.parametrizations.spectral_norm in float64 over
6 SGD steps (rtol 1e-10), for a linear and a conv-shaped weight; the start (15 power iterations) against
torch's own _power_method; evaluation with the stored vectors.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog.losses import Target
from scellis_jupyter.catalog.regularizers import RegContext
from scellis_jupyter.executor.executor import realize
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.autodiff import grad
from scellis_jupyter.tensor import tensor
from scellis_jupyter.program.training import build_train_step
from scellis_jupyter.executor import run_numpy
from scellis_jupyter.rng import Generator
from scellis_jupyter.spec import Spec

torch = pytest.importorskip("torch")
TF = torch.nn.functional
REF = sc.device("reference")


def _reg(name, graph=None, batch=6, shape=(5,), **hyper):
    ctx = RegContext(graph, None, Target("class", (), classes=3), batch, shape, "f32")
    return catalog.make("regularizer", name, **hyper).apply(ctx)


# ---- mixup --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.2, 1.0, 2.5])
def test_mixup_lambda_is_beta_distributed(alpha):
    reg = _reg("mixup", alpha=alpha)
    s = Generator(11).stream("augment")
    lams = np.array([float(reg.draw(s)["lam"]) for _ in range(3000)])
    assert stats.kstest(lams, stats.beta(alpha, alpha).cdf).pvalue > 1e-3


def test_mixup_prob_gate_permutation_and_replay():
    reg = _reg("mixup", alpha=0.5, prob=0.3, batch=9)
    g = Generator(2)
    draws = [reg.draw(g.stream("augment")) for _ in range(2000)]
    mixed = np.mean([float(d["lam"]) != 1.0 for d in draws])
    assert abs(mixed - 0.3) < 4 * math.sqrt(0.3 * 0.7 / 2000)
    assert all(sorted(d["perm"].tolist()) == list(range(9)) for d in draws[:50])
    assert g.positions["augment"] == 2000 * (2 + 9)              # words per step, whatever the values
    g.positions["augment"] = 11 * 7                              # replay step 7
    again = reg.draw(g.stream("augment"))
    assert again["lam"] == draws[7]["lam"] and np.array_equal(again["perm"], draws[7]["perm"])


TINY = """
[model]
input = {{ shape = {shape}, dtype = "f32" }}
nodes = [{flatten}{{ name = "fc", op = "linear", out = 3 }}]
[recipe]
loss = {loss}
optimizer = {{ name = "sgd", lr = 0.1 }}
batch_size = 6
regularizers = [{regs}]
"""


def _step(regs, shape="[5]", loss='"cross_entropy"', flatten=False):
    spec = Spec.from_text(TINY.format(shape=shape, loss=loss, regs=regs,
                                      flatten='{ op = "flatten" }, ' if flatten else ""))
    return spec, build_train_step(spec, 6, "reference", "debug")


def _feeds(step, x, y, w, b, extra=()):
    f = {"x": x, "y": y, "fc.weight": w, "fc.bias": b, "lr": np.float32(0.1), "step": np.float32(1)}
    f.update(dict(extra))
    return f


def _torch_step(x_mixed, pairs, w, b):
    """One SGD(lr 0.1) step of the linear model on the mixed batch, loss = sum_i lam_i CE(out, y_i)."""
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    out = torch.tensor(x_mixed, dtype=torch.float64).flatten(1) @ tw.T + tb
    loss = sum(lam * TF.cross_entropy(out, torch.tensor(y).long()) for lam, y in pairs)
    loss.backward()
    return loss.item(), (tw - 0.1 * tw.grad).detach().numpy(), (tb - 0.1 * tb.grad).detach().numpy()


def test_mixup_step_matches_the_paper():
    """Zhang et al. (2018): x~ = lam x_i + (1 - lam) x_j, loss = lam CE(f(x~), y_i) + (1 - lam) CE(f(x~), y_j)."""
    spec, step = _step('{ name = "mixup", alpha = 1.0 }')
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6).astype(np.int32)
    w, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    d = step.info["regularization"].draw(Generator(5).stream("augment"))
    lam, perm = float(d["reg:mixup.lam"]), d["reg:mixup.perm"]
    assert 0 < lam < 1 and not np.array_equal(perm, np.arange(6))
    out = run_numpy(step, _feeds(step, x, y, w, b, d), REF.impl)
    lam64 = float(np.float32(lam))
    xm = lam64 * x.astype(np.float64) + (1 - lam64) * x[perm].astype(np.float64)
    tl, tw, tb = _torch_step(xm, [(lam64, y), (1 - lam64, y[perm])], w, b)
    np.testing.assert_allclose(out["loss"], tl, rtol=1e-5)
    np.testing.assert_allclose(out["param:fc.weight"], tw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["param:fc.bias"], tb, rtol=1e-5, atol=1e-6)


def test_mixup_batch_in_f64():
    reg = _reg("mixup", alpha=0.7, batch=4, shape=(3,))
    d = reg.draw(Generator(1).stream("augment"))
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 3)), rng.integers(0, 5, 4)
    xn, yn = tensor(x, dtype="f64", device=REF).node, tensor(y, dtype="i32", device=REF).node
    ins = {k: tensor(v, device=REF).node for k, v in d.items()}
    xm, pairs = reg.mix(xn, yn, ins)
    got = realize([xm, pairs[1][1], pairs[1][0]], REF.impl)
    lam = float(d["lam"])
    np.testing.assert_allclose(got[0].numpy(), lam * x + (1 - lam) * x[d["perm"]], rtol=1e-12)
    assert np.array_equal(got[1].numpy(), y[d["perm"]]) and np.isclose(got[2].numpy(), 1 - lam, rtol=1e-7)


# ---- cutmix -------------------------------------------------------------------------------------------
def rand_bbox_paper(size, lam, cx, cy):
    """clovaai/CutMix-PyTorch train.py rand_bbox, transcribed, with the centre given (np.random.randint
    there): W = size[2] and H = size[3] are the image's two spatial axes in that order."""
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1. - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)
    return bbx1, bby1, bbx2, bby2


def _words(gen_seed, pos, n):
    g = Generator(gen_seed)
    g.positions["augment"] = pos
    return g.stream("augment").bits(n)


@pytest.mark.parametrize("seed", range(6))
def test_cutmix_step_matches_the_paper(seed):
    """The box, lam and the step against the paper's code: input[:, :, x1:x2, y1:y2] = input[perm, ...],
    lam = 1 - box area / image area, loss = CE(out, y) lam + CE(out, y[perm]) (1 - lam)."""
    spec, step = _step('{ name = "cutmix", alpha = 1.0 }', shape="[1, 6, 5]", flatten=True)
    gen = Generator(seed)
    d = step.info["regularization"].draw(gen.stream("augment"))
    # the documented draw order: words lam, gate, then the centre on each spatial axis, then the permutation
    w0 = _words(seed, 0, 4).astype(np.float64)
    lam0 = stats.beta(1.0, 1.0).ppf((w0[0] + 0.5) / 2 ** 32)
    c0, c1 = (int(w0[2]) * 6) >> 32, (int(w0[3]) * 5) >> 32
    size = (6, 1, 6, 5)
    bbx1, bby1, bbx2, bby2 = rand_bbox_paper(size, lam0, c0, c1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(size).astype(np.float32)
    y = rng.integers(0, 3, 6).astype(np.int32)
    perm = d["reg:cutmix.perm"]
    xp = x.astype(np.float64).copy()
    xp[:, :, bbx1:bbx2, bby1:bby2] = x[perm, :, bbx1:bbx2, bby1:bby2]
    lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (size[-1] * size[-2]))
    assert np.isclose(float(d["reg:cutmix.lam"]), lam, rtol=1e-7)
    mask = np.ones((6, 5))
    mask[bbx1:bbx2, bby1:bby2] = 0
    assert np.array_equal(d["reg:cutmix.mask"], mask)
    w, b = rng.standard_normal((3, 30)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    out = run_numpy(step, _feeds(step, x, y, w, b, d), REF.impl)
    tl, tw, tb = _torch_step(xp, [(lam, y), (1 - lam, y[perm])], w, b)
    np.testing.assert_allclose(out["loss"], tl, rtol=1e-5)
    np.testing.assert_allclose(out["param:fc.weight"], tw, rtol=1e-5, atol=1e-6)


def test_cutmix_needs_images():
    with pytest.raises(sc.SpecError, match="two spatial axes") as e:
        _step('{ name = "cutmix" }')
    assert e.value.where == "<spec>:9:17"                   # the regularizer's table in the spec


# ---- label smoothing ----------------------------------------------------------------------------------
def test_label_smoothing_is_cross_entropys_label_smoothing():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6).astype(np.int32)
    w, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    _, as_reg = _step('{ name = "label_smoothing", eps = 0.15 }')
    _, as_loss = _step("", loss='{ name = "cross_entropy", label_smoothing = 0.15 }')
    a = run_numpy(as_reg, _feeds(as_reg, x, y, w, b), REF.impl)
    c = run_numpy(as_loss, _feeds(as_loss, x, y, w, b), REF.impl)
    assert all(np.array_equal(a[k], c[k]) for k in a)
    want = TF.cross_entropy(torch.tensor(x @ w.T + b, dtype=torch.float64), torch.tensor(y).long(),
                            label_smoothing=0.15).item()
    np.testing.assert_allclose(a["loss"], want, rtol=1e-6)


def test_label_smoothing_refuses_twice_and_losses_without_it():
    with pytest.raises(sc.ScellisError, match="both on the loss and as a regularizer"):
        _step('{ name = "label_smoothing" }', loss='{ name = "cross_entropy", label_smoothing = 0.1 }')
    with pytest.raises(sc.ScellisError, match="'multi_margin' has none"):
        _step('{ name = "label_smoothing" }', loss='"multi_margin"')


# ---- weight decay -------------------------------------------------------------------------------------
def _graph():
    return Spec.from_text(TINY.format(shape="[5]", loss='"cross_entropy"', regs="", flatten="")).graph


def _ours_with_decay(opt_name, opt_hyper, reg_hyper, params, grads, lrs):
    """Our optimizer + weight_decay regularizer, float64, as the step applies them: hook, update, decay."""
    reg = _reg("weight_decay", graph=_graph(), **reg_hyper)
    opt = catalog.make("optimizer", opt_name, **opt_hyper)
    names = ["fc.weight", "fc.bias"]
    ps = dict(zip(names, params))
    sts = {n: catalog.initial_state(opt, p.shape, "f64") for n, p in ps.items()}
    out = []
    for t, (gs, lr) in enumerate(zip(grads, lrs), start=1):
        for n, g in zip(names, gs):
            pn = tensor(ps[n], dtype="f64", device=REF).node
            gn = tensor(g, dtype="f64", device=REF).node
            lrn = F.scalar(lr, "f64")
            if reg.grad_hook:
                gn = reg.grad_hook(n, gn, pn)
            sn = {k: tensor(v, dtype="f64", device=REF).node for k, v in sts[n].items()}
            new, nst = opt.update(pn, gn, sn, F.scalar(float(t), "f64"), lrn)
            if reg.decay:
                new = reg.decay(n, new, pn, lrn)
            keys = list(nst)
            vals = realize([new] + [nst[k] for k in keys], REF.impl)
            ps[n] = vals[0].numpy().copy()
            sts[n] = {k: v.numpy().copy() for k, v in zip(keys, vals[1:])}
        out.append({n: ps[n].copy() for n in names})
    return out


def _torch_opt(cls, hyper, params, grads, lrs, decay_bias):
    ts = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in params]
    groups = [{"params": [ts[0]]}, {"params": [ts[1]], "weight_decay": hyper.get("weight_decay", 0) if decay_bias
                                                         else 0.0}]
    opt = cls(groups, **hyper)
    out = []
    for gs, lr in zip(grads, lrs):
        for grp in opt.param_groups:
            grp["lr"] = lr
        for t, g in zip(ts, gs):
            t.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        out.append({"fc.weight": ts[0].detach().numpy().copy(), "fc.bias": ts[1].detach().numpy().copy()})
    return out


@pytest.mark.parametrize("opt,hyper,reg,cls,their", [
    ("sgd", {"momentum": 0.9}, {"decay": 0.05, "mode": "l2"}, "SGD", {"momentum": 0.9, "weight_decay": 0.05}),
    ("sgd", {}, {"decay": 0.2, "mode": "l2", "targets": ["*"]}, "SGD", {"weight_decay": 0.2}),
    ("adam", {}, {"decay": 0.1, "mode": "l2"}, "Adam", {"weight_decay": 0.1}),
    ("adam", {}, {"decay": 0.1, "mode": "decoupled", "targets": ["fc.*"]}, "AdamW", {"weight_decay": 0.1}),
    ("lion", {}, {"decay": 0.1, "mode": "decoupled"}, None, None),
])
def test_weight_decay_matches_torch(opt, hyper, reg, cls, their):
    rng = np.random.default_rng(4)
    params = [rng.standard_normal((3, 5)), rng.standard_normal(3)]
    grads = [[rng.standard_normal((3, 5)), rng.standard_normal(3)] for _ in range(6)]
    lrs = [0.1, 0.05, 0.05, 0.02, 0.02, 0.01]
    ours = _ours_with_decay(opt, hyper, reg, params, grads, lrs)
    decay_bias = reg.get("targets") is not None
    if cls is None:      # any optimizer: decoupled decay is w_new = update(w) - lr * decay * w
        plain = _ours_with_decay(opt, hyper, {"decay": 0.0, "mode": "l2"}, params, grads, lrs[:1])[0]
        np.testing.assert_allclose(ours[0]["fc.weight"], plain["fc.weight"] - lrs[0] * 0.1 * params[0], rtol=1e-12)
        np.testing.assert_allclose(ours[0]["fc.bias"], plain["fc.bias"], rtol=1e-12)   # biases are not decayed
        return
    want = _torch_opt(getattr(torch.optim, cls), their, params, grads, lrs, decay_bias)
    for t, (a, b) in enumerate(zip(ours, want)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-10, atol=1e-13, err_msg=f"step {t + 1} {k}")


def test_weight_decay_through_a_training_step_with_clipping():
    """spec: sgd + weight_decay (l2) + clip_grad_norm == torch: clip_grad_norm_ then SGD(weight_decay)."""
    text = TINY.format(shape="[5]", loss='"cross_entropy"', regs='{ name = "weight_decay", decay = 0.3 }',
                       flatten="").replace("batch_size = 6", "batch_size = 6\nclip_grad_norm = 0.5")
    step = build_train_step(Spec.from_text(text), 6, "reference", "debug")
    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    tw = torch.tensor(w.astype(np.float64), requires_grad=True)
    tb = torch.tensor(b.astype(np.float64), requires_grad=True)
    opt = torch.optim.SGD([{"params": [tw], "weight_decay": 0.3}, {"params": [tb], "weight_decay": 0.0}], lr=0.1)
    for _ in range(4):
        x, y = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6).astype(np.int32)
        out = run_numpy(step, _feeds(step, x, y, w, b), REF.impl)
        w, b = out["param:fc.weight"], out["param:fc.bias"]
        opt.zero_grad()
        loss = TF.cross_entropy(torch.tensor(x, dtype=torch.float64) @ tw.T + tb, torch.tensor(y).long())
        loss.backward()
        torch.nn.utils.clip_grad_norm_([tw, tb], 0.5)
        opt.step()
        np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-5)
        np.testing.assert_allclose(w, tw.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, tb.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---- spectral norm ------------------------------------------------------------------------------------
def _sn_torch(w0, u0, v0, n_iter):
    from torch.nn.utils.parametrizations import spectral_norm
    if w0.ndim == 2:
        m = torch.nn.Linear(w0.shape[1], w0.shape[0], bias=False).double()
    else:
        m = torch.nn.Conv2d(w0.shape[1], w0.shape[0], w0.shape[2:], bias=False).double()
    with torch.no_grad():
        m.weight.copy_(torch.tensor(w0))
    spectral_norm(m, n_power_iterations=n_iter)
    p = m.parametrizations.weight[0]
    with torch.no_grad():
        p._u.copy_(torch.tensor(u0))
        p._v.copy_(torch.tensor(v0))
    return m, p


@pytest.mark.parametrize("shape,n_iter", [((5, 7), 1), ((5, 7), 3), ((4, 2, 3, 3), 1)])
def test_spectral_norm_matches_torch_over_training_steps(shape, n_iter):
    """Six SGD steps of a linear (or conv) layer with spectral norm: loss, weight, u and v each step."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal(shape)
    out_dim, in_dim = shape[0], int(np.prod(shape[1:]))
    reg = catalog.make("regularizer", "spectral_norm", n_power_iterations=n_iter)
    from scellis_catalog.regularizers.spectral_norm import power_iterations_np
    u0 = rng.standard_normal(out_dim)
    v0 = rng.standard_normal(in_dim)
    u0, v0 = u0 / np.linalg.norm(u0), v0 / np.linalg.norm(v0)
    u, v = power_iterations_np(w, u0, v0, 15, 1e-12)                     # our start ...
    m, p = _sn_torch(w, u0, v0, n_iter)
    with torch.no_grad():
        p._power_method(m.parametrizations.weight.original.flatten(1), 15)  # ... is torch's start
    np.testing.assert_allclose(u, p._u.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(v, p._v.numpy(), rtol=1e-10, atol=1e-14)
    fn = reg._transform(shape)
    x = rng.standard_normal((9,) + ((in_dim,) if len(shape) == 2 else (shape[1], 5, 5)))
    xt = torch.tensor(x)
    m.eval()                                              # (a training-mode call would iterate u, v)
    with torch.no_grad():
        target = rng.standard_normal(tuple(m(xt).shape))
    m.train()
    for t in range(6):
        wn = tensor(w, dtype="f64", device=REF).node
        bufs = {"sn_u": tensor(u, dtype="f64", device=REF).node, "sn_v": tensor(v, dtype="f64", device=REF).node}
        weff, new = fn(wn, bufs, True)
        xn = tensor(x, dtype="f64", device=REF).node
        pred = F.matmul(xn, F.transpose(weff)) if len(shape) == 2 else F.conv2d(xn, weff)
        d = F.sub(pred, tensor(target, dtype="f64", device=REF).node)
        loss = F.mean(F.mul(d, d))
        g, = grad([loss], [wn])
        lv, gv, un, vn = realize([loss, g, new["sn_u"], new["sn_v"]], REF.impl)
        m.zero_grad()
        tl = ((m(xt) - torch.tensor(target)) ** 2).mean()
        tl.backward()
        orig = m.parametrizations.weight.original
        np.testing.assert_allclose(lv.numpy(), tl.item(), rtol=1e-10, err_msg=f"loss step {t}")
        np.testing.assert_allclose(gv.numpy(), orig.grad.numpy(), rtol=1e-10, atol=1e-13, err_msg=f"grad step {t}")
        np.testing.assert_allclose(un.numpy(), p._u.numpy(), rtol=1e-10, atol=1e-13, err_msg=f"u step {t}")
        np.testing.assert_allclose(vn.numpy(), p._v.numpy(), rtol=1e-10, atol=1e-13, err_msg=f"v step {t}")
        w, u, v = w - 0.5 * gv.numpy(), un.numpy().copy(), vn.numpy().copy()
        with torch.no_grad():
            orig -= 0.5 * orig.grad
    m.eval()                                              # evaluation: the stored u, v, no iteration
    weff, new = fn(tensor(w, dtype="f64", device=REF).node, {"sn_u": tensor(u, dtype="f64", device=REF).node,
                                                             "sn_v": tensor(v, dtype="f64", device=REF).node}, False)
    assert new == {}
    with torch.no_grad():
        np.testing.assert_allclose(realize([weff], REF.impl)[0].numpy(), m.weight.numpy(), rtol=1e-10, atol=1e-14)


def test_spectral_norm_names_unknown_layers():
    with pytest.raises(sc.SpecError) as e:
        _step('{ name = "spectral_norm", layers = ["fc2"] }')
    assert "not a node of this model" in str(e.value) and "did you mean 'fc'" in str(e.value)
