"""Losses and regularizers in the loop, as a user runs them from a spec.

Multi-input losses train real models on digits (triplets, view pairs, +-1 pairs, ranked pairs) and are
judged on held-out data by what they are for (triplet / retrieval / pair / ranking accuracy, computed
here in numpy from the trained weights). Regression losses from the catalog train by name and with
parameters. A user optimizer and a user loss (from a folder and from cell source) plan, run, checkpoint
and resume bit-identically through the same test as built-ins. A spectral-norm run plans its buffers,
checkpoints them and resumes them exactly. Labels that do not fit the loss are refused clearly.
"""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.catalog.losses import TargetError
from scellis_jupyter.spec import Spec, SpecError
from scellis_jupyter.run.run import Run

from fixtures import entry_source


def _digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def _mlp(x, w):
    """numpy forward of linear(32) -> relu -> linear(16) on the last axis, named as in SPEC_PAIRS."""
    h = np.maximum(x @ w["enc1.weight"].T + w["enc1.bias"], 0)
    return h @ w["enc2.weight"].T + w["enc2.bias"]


HEAD = """
[data]
dataset = "{path}"
split = {{ train = 0.7, val = 0.1, test = 0.2 }}
[model]
nodes = [
  {{ name = "enc1", op = "linear", out = 32 }},
  {{ op = "relu" }},
  {{ name = "enc2", op = "linear", out = {out} }},
{extra}]
[recipe]
loss = {loss}
optimizer = {{ name = "adam", lr = 3e-3 }}
steps = {steps}
batch_size = 64
determinism = "debug"
seed = 1
"""


def _triplets(x, y, n, rng):
    a = rng.integers(0, len(x), n)
    p = np.array([rng.choice(np.flatnonzero(y == y[i])) for i in a])
    q = np.array([rng.choice(np.flatnonzero(y != y[i])) for i in a])
    return np.stack([x[a], x[p], x[q]], 1)


def _case_triplet(tmp_path, x, y, rng):
    xs = _triplets(x, y, 1500, rng)
    path = tmp_path / "triplets.npz"
    np.savez(path, x=xs)

    def score(w, xt):
        e = _mlp(xt, w)
        return np.mean(np.linalg.norm(e[:, 0] - e[:, 1], axis=-1) < np.linalg.norm(e[:, 0] - e[:, 2], axis=-1))
    return path, {"out": 16, "extra": "", "loss": '{ name = "triplet_margin", margin = 1.0 }'}, xs, None, score


def _case_info_nce(tmp_path, x, y, rng):
    i = rng.integers(0, len(x), 1500)
    views = np.stack([x[i] + 0.15 * rng.standard_normal(x[i].shape),
                      x[i] + 0.15 * rng.standard_normal(x[i].shape)], 1).astype(np.float32)
    path = tmp_path / "views.npz"
    np.savez(path, x=views)

    def score(w, xt):            # retrieval: the nearest second view (cosine) of view 1 is its own, in 64s
        hits = []
        for lo in range(0, len(xt) - 63, 64):
            e = _mlp(xt[lo:lo + 64], w)
            a = e[:, 0] / np.linalg.norm(e[:, 0], axis=-1, keepdims=True)
            b = e[:, 1] / np.linalg.norm(e[:, 1], axis=-1, keepdims=True)
            hits.append(np.argmax(a @ b.T, 1) == np.arange(64))
        return np.mean(np.concatenate(hits))
    return path, {"out": 16, "extra": "", "loss": '{ name = "info_nce", temperature = 0.2 }'}, views, None, score


def _case_cosine(tmp_path, x, y, rng):
    a = rng.integers(0, len(x), 1500)
    same = rng.integers(0, 2, 1500) == 1
    b = np.array([rng.choice(np.flatnonzero((y == y[i]) == s)) for i, s in zip(a, same)])
    pairs = np.stack([x[a], x[b]], 1)
    lab = np.where(same, 1, -1).astype(np.int64)
    path = tmp_path / "pairs.npz"
    np.savez(path, x=pairs, y=lab)

    def score(w, xt, yt):
        e = _mlp(xt, w)
        cos = (e[:, 0] * e[:, 1]).sum(-1) / np.linalg.norm(e[:, 0], axis=-1) / np.linalg.norm(e[:, 1], axis=-1)
        return np.mean(np.where(cos > 0.5, 1, -1) == yt)
    return path, {"out": 16, "extra": "", "loss": '{ name = "cosine_embedding", margin = 0.2 }'}, pairs, lab, score


def _case_ranking(tmp_path, x, y, rng):
    a = rng.integers(0, len(x), 3000)
    b = rng.integers(0, len(x), 3000)
    keep = y[a] != y[b]
    a, b = a[keep][:1500], b[keep][:1500]
    pairs = np.stack([x[a], x[b]], 1)
    lab = np.where(y[a] > y[b], 1, -1).astype(np.int64)
    path = tmp_path / "ranked.npz"
    np.savez(path, x=pairs, y=lab)

    def score(w, xt, yt):
        s = _mlp(xt, w)[..., 0]
        return np.mean(np.where(s[:, 0] > s[:, 1], 1, -1) == yt)
    extra = '  { op = "reshape", shape = [2] },\n'
    return path, {"out": 1, "extra": extra, "loss": '{ name = "margin_ranking", margin = 0.5 }'}, pairs, lab, score


@pytest.mark.parametrize("case,floor", [(_case_triplet, 0.9), (_case_info_nce, 0.8), (_case_cosine, 0.85),
                                        (_case_ranking, 0.85)],
                         ids=["triplet_margin", "info_nce", "cosine_embedding", "margin_ranking"])
def test_multi_input_losses_train_real_models(tmp_path, case, floor):
    x, y = _digits()
    path, fill, xs, ys, score = case(tmp_path, x, y, np.random.default_rng(0))
    spec = Spec.from_text(HEAD.format(path=path, steps=150, **fill))
    run = Run(spec, device="reference")
    test = run.split["test"]
    args = (xs[test],) if ys is None else (xs[test], ys[test])
    before = score(run.weights(), *args)
    losses = [s.loss for s in run]
    after = score(run.weights(), *args)
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10]), (losses[:3], losses[-3:])
    assert after >= floor and after > before + 0.1, (before, after)
    assert run.result()["measured_peak_bytes"] == run.result()["predicted_peak_bytes"]


REGRESSION = """
[data]
dataset = "synthetic_regression"
n_rows = 400
n_features = 6
[model]
nodes = [{{ op = "linear", out = 16 }}, {{ op = "tanh" }}, {{ op = "linear", out = 1 }}]
[recipe]
loss = {loss}
optimizer = {{ name = "adam", lr = 1e-2 }}
steps = 60
batch_size = 32
determinism = "debug"
"""


@pytest.mark.parametrize("loss", ['"huber"', '{ name = "smooth_l1", beta = 0.5 }', '"l1"',
                                  '{ name = "mse", reduction = "sum" }'])
def test_regression_losses_train_by_name(loss):
    run = Run(REGRESSION.format(loss=loss), device="reference")
    ls = [s.loss for s in run]
    assert run.step_prog.info["target"].kind == "real"
    assert np.mean(ls[-5:]) < 0.5 * np.mean(ls[:5])


def test_labels_that_do_not_fit_the_loss_are_refused_at_the_first_batch(tmp_path):
    x, y = _digits()
    pairs = np.stack([x[:600], x[600:1200]], 1)
    np.savez(tmp_path / "p.npz", x=pairs, y=(y[:600] == y[600:1200]).astype(np.int64))   # 0/1, not -1/+1
    spec = HEAD.format(path=tmp_path / "p.npz", steps=5, out=8, extra="", loss='"cosine_embedding"')
    run = Run(spec, device="reference")
    with pytest.raises(TargetError) as e:
        next(iter(run))
    assert "not +1 or -1" in str(e.value) and "2*y - 1" in e.value.diagnostic.hint


def test_a_multi_input_loss_on_the_wrong_output_is_a_spec_error(tmp_path):
    x, y = _digits()
    np.savez(tmp_path / "t.npz", x=_triplets(x, y, 100, np.random.default_rng(0))[:, :2])   # pairs, not triplets
    text = HEAD.format(path=tmp_path / "t.npz", steps=5, out=8, extra="", loss='"triplet_margin"')
    with pytest.raises(SpecError) as e:
        Spec.from_text(text, source="pairs.toml")
    line = text.splitlines().index('loss = "triplet_margin"') + 1
    assert e.value.where == f"pairs.toml:{line}:8"
    assert "[3, D] per example" in str(e.value)


# ---- a user optimizer and a user loss, exactly like built-ins ---------------------------------------------


USER_SPEC = """
[data]
dataset = "synthetic_regression"
n_rows = 300
n_features = 5
[model]
nodes = [{{ op = "linear", out = 8 }}, {{ op = "tanh" }}, {{ op = "linear", out = 1 }}]
[recipe]
loss = {loss}
optimizer = {opt}
scheduler = {{ name = "cosine", warmup_steps = 3 }}
steps = 16
batch_size = 32
determinism = "debug"
seed = 4
"""


def _load(how, tmp_path):
    if how == "builtin":
        return '{ name = "sgd", lr = 0.05, momentum = 0.9 }', '{ name = "huber", delta = 0.7 }', "sgd"
    opt, loss = f"user_sgd_{how}", f"user_logcosh_{how}"
    if how == "folder":
        (tmp_path / "optimizers").mkdir()
        (tmp_path / "losses").mkdir()
        (tmp_path / "optimizers" / "heavy.py").write_text(entry_source("user_sgd", name=opt, buf_shape="shape"))
        (tmp_path / "losses" / "logcosh.py").write_text(entry_source("user_logcosh", name=loss))
        assert {e.name for e in catalog.load_folder(tmp_path, check=True)} == {opt, loss}
    else:
        catalog.load_source(entry_source("user_sgd", name=opt, buf_shape="shape"), "cell-opt", check=True)
        catalog.load_source(entry_source("user_logcosh", name=loss), "cell-loss", check=True)
    return f'{{ name = "{opt}", lr = 0.05, beta = 0.9 }}', f'{{ name = "{loss}", scale = 2.0 }}', opt


@pytest.mark.parametrize("how", ["builtin", "folder", "source"])
def test_user_optimizer_and_loss_plan_run_checkpoint_and_resume_like_builtins(how, tmp_path, clean_registry):
    """The same test for built-ins and user entries: the plan counts the optimizer's declared state, the
    loop trains, a checkpoint at N resumed to 2N is bit-identical to 2N in one go."""
    opt, loss, opt_name = _load(how, tmp_path)
    spec = Spec.from_text(USER_SPEC.format(opt=opt, loss=loss))
    plan = sc.plan(spec, device="reference")
    n_params = sum(int(np.prod(p.shape)) for p in spec.graph.params)
    assert plan.verdict != "red" and plan.breakdown["optimizer_state"] == 4 * n_params    # one f32 slot each
    whole = Run(spec, device="reference", steps=16)
    losses = [s.loss for s in whole]
    assert np.mean(losses[-4:]) < np.mean(losses[:4])
    first = Run(spec, device="reference", store=tmp_path / "store", steps=8)
    list(first)
    assert first.step_prog.info["optimizer"] == type(catalog.make("optimizer", opt_name)).__name__
    resumed = Run(spec, device="reference", store=tmp_path / "store", resume=first.checkpoints[-1][:12], steps=16)
    list(resumed)
    assert resumed.loss_history == whole.loss_history
    for k, v in whole.weights().items():
        assert np.array_equal(resumed.weights()[k], v), k
    for p, slots in whole.optimizer_state().items():
        for s, v in slots.items():
            assert np.array_equal(resumed.optimizer_state()[p][s], v), (p, s)


# ---- spectral norm's buffers: planned, checkpointed, resumed ----------------------------------------------
SN = """
[data]
dataset = "digits"
[model]
nodes = [{ name = "fc1", op = "linear", out = 32 }, { op = "relu" }, { name = "fc2", op = "linear", out = 10 }]
[recipe]
loss = "cross_entropy"
optimizer = { name = "adam", lr = 3e-3 }
steps = 12
batch_size = 32
determinism = "debug"
regularizers = [{ name = "spectral_norm", layers = ["fc1"], n_power_iterations = 2 }]
"""


def test_spectral_norm_buffers_are_planned_checkpointed_and_resumed(tmp_path):
    plan = sc.plan(SN, device="reference")
    assert plan.breakdown["buffers"] == 4 * (32 + 64)                   # u [32] and v [64], f32
    whole = Run(SN, device="reference")
    u0, v0 = whole.buffers()["fc1.weight.sn_u"], whole.buffers()["fc1.weight.sn_v"]
    w = whole.weights()["fc1.weight"].astype(np.float64)
    assert np.isclose(u0 @ w @ v0, np.linalg.svd(w, compute_uv=False)[0], rtol=1e-3)   # the start: sigma_max
    list(whole)
    assert not np.array_equal(whole.buffers()["fc1.weight.sn_u"], u0)      # every step iterates
    first = Run(SN, device="reference", store=tmp_path / "s", steps=5)
    list(first)
    ck = first.store.load_checkpoint(first.checkpoints[-1])
    assert set(ck.optimizer_state["fc1.weight"]) >= {"sn_u", "sn_v", "m", "v"}
    again = Run(SN, device="reference", store=tmp_path / "s", resume=first.checkpoints[-1])
    list(again)
    assert again.loss_history == whole.loss_history
    for k, b in whole.buffers().items():
        assert np.array_equal(again.buffers()[k], b), k


# ---- exact resume with every kind of randomness on --------------------------------------------------------
AUGMENTED = """
name = "digits-augmented"
[data]
dataset = "digits"
[model]
input = { shape = [1, 8, 8], dtype = "f32" }
nodes = [
  { op = "flatten" },
  { name = "fc1", op = "linear", out = 48 },
  { op = "relu" },
  { op = "dropout", p = 0.1 },
  { name = "logits", op = "linear", out = 10 },
]
[recipe]
loss = { name = "cross_entropy", label_smoothing = 0.05 }
optimizer = { name = "adam", lr = 3e-3 }
scheduler = { name = "cosine", warmup_steps = 5 }
epochs = 2
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
seed = 3
regularizers = [{ name = "mixup", alpha = 0.4, prob = 0.8 }, { name = "spectral_norm", layers = ["fc1"] },
                { name = "weight_decay", decay = 1e-3, mode = "decoupled" }]
augment = [{ name = "gaussian_noise", std = 0.05 }, { name = "random_shift", pixels = 1 }, { name = "hflip", prob = 0.3 }]
sampling = { class_weights = [3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5] }
"""


@pytest.mark.parametrize("device", ["reference", "wgpu"])
def test_exact_resume_with_mixup_augmentation_and_weighted_sampling(tmp_path, run_python, device):
    """Train N, checkpoint, resume in a new process to the horizon (2 epochs, so past an epoch end): the
    same losses, weights, optimizer state, spectral-norm buffers and stream positions as one go."""
    from test_run import RESUME                 # tests/train/test_run.py's resume-in-a-new-process script
    import json
    if device == "wgpu":
        try:
            sc.device("wgpu")
        except sc.ScellisError as e:  # pragma: no cover
            pytest.skip(f"no wgpu adapter: {e}")
    n = 9
    spec = tmp_path / "augmented.toml"
    spec.write_text(AUGMENTED)
    first = Run(Spec.from_file(spec), device=device, store=tmp_path / "s", steps=n)
    list(first)
    assert first.gen.positions["augment"] > 0 and first.loader.weights is not None
    r = run_python(RESUME, first.checkpoints[-1][:12], str(tmp_path / "s"), device, SCELLIS_DEVICE=device)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    whole = Run(Spec.from_file(spec), device=device)
    list(whole)
    assert got["steps"] == whole.horizon == 2 * len(whole.loader)
    assert got["loss"] == whole.loss_history
    for k, v in whole.weights().items():
        assert np.array_equal(np.asarray(got["w"][k], np.float32), v), k
    for p, d in whole.optimizer_state().items():
        for k, v in d.items():
            assert np.array_equal(np.asarray(got["s"][f"{p}.{k}"], np.float32), v), (p, k)
    assert {"fc1.weight.sn_u", "fc1.weight.sn_v"} <= set(got["s"])
    assert got["rng"] == whole.gen.state_dict()
    assert got["hist"] == whole.metric_history


def _short(text, **repl):
    text = text.replace("epochs = 2", "steps = 8").replace('scheduler = { name = "cosine", warmup_steps = 5 }\n', "")
    for a, b in repl.items():
        text = text.replace(a, b)
    return text


def test_activation_checkpointing_with_regularizers_is_bit_identical():
    """Recomputed segments, the spectral-norm transform's gradient chained back to the trained weight."""
    plain = Run(_short(AUGMENTED), device="reference")
    ck = Run(_short(AUGMENTED, **{"seed = 3": 'seed = 3\ncheckpointing = "activations"'}), device="reference")
    assert [s.loss for s in ck] == [s.loss for s in plain]
    for k, v in plain.weights().items():
        assert np.array_equal(ck.weights()[k], v), k
    assert all(np.array_equal(ck.buffers()[k], v) for k, v in plain.buffers().items())


def test_gradient_accumulation_with_mixup_is_the_big_batch():
    """The mixing permutation spans the whole update batch; each micro-batch takes its rows of x~ and of
    both target sets, so 2 x 32 accumulated is the 64 batch (up to f32 summation order)."""
    nodrop = {'{ op = "dropout", p = 0.1 },': ""}
    big = Run(_short(AUGMENTED, **nodrop), device="reference")
    acc = Run(_short(AUGMENTED, **nodrop, **{"batch_size = 64": "batch_size = 32\ngrad_accum_steps = 2"}),
              device="reference")
    lb, la = [s.loss for s in big], [s.loss for s in acc]
    np.testing.assert_allclose(la, lb, rtol=2e-5)
    for k, v in big.weights().items():
        np.testing.assert_allclose(acc.weights()[k], v, rtol=1e-4, atol=1e-5)
    assert acc.gen.positions["augment"] == big.gen.positions["augment"]
