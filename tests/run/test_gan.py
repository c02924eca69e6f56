"""Adversarial training in the step-driven loop: it learns, it is planned, it resumes exactly.

Learning is measured on the generated distribution against held-out data of the ring of 8 Gaussians
(radius 2, std 0.1), next to the untrained generator (the same spec and seed, no rounds) as the baseline:
  - mode coverage: a mode counts when >= 2% of 4000 samples fall within 3 std of it; "quality" is the
    fraction of samples within 3 std of some mode (Srivastava et al. 2017's VEEGAN measures);
  - squared MMD with a Gaussian kernel (bandwidth 1) between 1000 samples and 400 held-out points,
    the unbiased estimator of Gretton et al. 2012, written out in numpy here;
  - mean and covariance against the held-out data's.
Thresholds: >= 7 of 8 modes, quality >= 0.6, MMD^2 below a tenth of the baseline's, |mean| < 0.2 and
covariance within 0.4 (max abs entry) of the data's; the baseline covers at most 1 mode.
Resume is compared bit for bit (np.array_equal on every weight and optimizer slot, == on the losses).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.data import ring_centers
from scellis_jupyter.run.gan import GANRun
from scellis_jupyter.run.run import Run

from fixtures.devices import WG


RING = """
name = "gan-ring"
[data]
dataset = "synthetic_ring"
n_rows = 4000
[model.generator]
input = { shape = [8] }
nodes = [
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 2, init = "xavier_uniform" },
]
[model.discriminator]
nodes = [
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 1, init = "xavier_uniform" },
]
[recipe]
kind = "gan"
optimizer = { name = "adam", lr = 2e-3, betas = [0.5, 0.999] }
batch_size = 128
steps = 1200
seed = 0
determinism = "debug"
"""
SHORT = RING.replace("steps = 1200", "steps = 40").replace("batch_size = 128", "batch_size = 32") \
    .replace("n_rows = 4000", "n_rows = 400") \
    .replace('{ op = "linear", out = 1,', '{ op = "dropout", p = 0.25 }, { op = "linear", out = 1,')


def modes(x, k=8, std=0.1):
    d = np.linalg.norm(x[:, None, :] - ring_centers(k)[None], axis=2)
    near = d.min(1) < 3 * std
    counts = np.bincount(d.argmin(1)[near], minlength=k)
    return int((counts >= 0.02 * len(x)).sum()), float(near.mean())


def mmd2(x, y, bw=1.0):
    """Unbiased squared MMD, Gaussian kernel exp(-|a-b|^2 / (2 bw^2))."""
    def k(a, b):
        return np.exp(-((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / (2 * bw * bw))
    kx, ky, kxy = k(x, x), k(y, y), k(x, y)
    n, m = len(x), len(y)
    return ((kx.sum() - np.trace(kx)) / (n * (n - 1)) + (ky.sum() - np.trace(ky)) / (m * (m - 1))
            - 2 * kxy.mean())


@pytest.mark.slow
def test_generator_learns_the_ring_of_gaussians_and_the_plan_is_what_the_loop_allocates():
    run = GANRun(RING, device="reference")
    held = run.dataset.read(run.split["test"])[0].astype(np.float64)
    baseline = GANRun(RING, device="reference").sample(4000).astype(np.float64)   # untrained, same init
    rounds = list(run)
    assert len(rounds) == 1200 and run.updates == {"discriminator": 1200, "generator": 1200}
    assert run.step_peak == run.plan.peak_bytes                   # measured before any sampling
    got = run.sample(4000).astype(np.float64)
    (m_got, q_got), (m_base, q_base) = modes(got), modes(baseline)
    assert m_base <= 1 and m_got >= 7 and q_got >= 0.6, (m_got, q_got, m_base, q_base)
    d_got, d_base = mmd2(got[:1000], held), mmd2(baseline[:1000], held)
    assert d_got < 0.1 * d_base, (d_got, d_base)
    assert np.abs(got.mean(0)).max() < 0.2
    assert np.abs(np.cov(got.T) - np.cov(held.T)).max() < 0.4, (np.cov(got.T), np.cov(held.T))
    assert np.abs(np.cov(baseline.T) - np.cov(held.T)).max() > 1.0       # the baseline is far off
    assert all(np.isfinite([r.d_loss, r.g_loss]).all() and r.skipped == 0 for r in rounds)


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
def test_wgpu_rounds_match_reference_and_its_plan():
    a, b = GANRun(SHORT, device=WG, steps=6), GANRun(SHORT, device="reference", steps=6)
    la = np.array([[r.d_loss, r.g_loss, r.d_real, r.d_fake] for r in a])
    lb = np.array([[r.d_loss, r.g_loss, r.d_real, r.d_fake] for r in b])
    np.testing.assert_allclose(la, lb, rtol=1e-3, atol=1e-4)
    for k, v in a.weights().items():
        np.testing.assert_allclose(v, b.weights()[k], rtol=1e-3, atol=1e-3, err_msg=k)
    assert a.step_peak == a.plan.peak_bytes and b.step_peak == b.plan.peak_bytes
    assert a.plan.extras["uniform_params"] > 0                  # wgpu keeps one parameter block per Program


def test_user_code_sets_the_balance_and_each_step_updates_only_its_network():
    run = GANRun(SHORT, device="reference", steps=10)
    w0 = run.weights()
    seen = []
    for r in run:
        seen.append((r.d_steps, r.g_steps))
        w = run.weights()
        g_same = all(np.array_equal(w[k], w0[k]) for k in w if k.startswith("generator/"))
        d_same = all(np.array_equal(w[k], w0[k]) for k in w if k.startswith("discriminator/"))
        if r.step == 2:
            run.d_steps, run.g_steps = 3, 0                   # a discriminator-only round next
        elif r.step == 3:
            assert g_same and not d_same                      # the discriminator step never writes G
            run.d_steps, run.g_steps = 0, 1
        elif r.step == 4:
            assert d_same and not g_same                      # the generator step never writes D
            run.d_steps, run.g_steps = 2, 1
        elif r.step == 6:
            run.stop("enough")
        w0 = w
    assert seen == [(1, 1), (1, 1), (3, 0), (0, 1), (2, 1), (2, 1)]
    assert run.updates == {"discriminator": 1 + 1 + 3 + 0 + 2 + 2, "generator": 4 + 1}
    assert run.state == "finished" and run.result()["stop_reason"] == "enough"
    assert len(run.metric_history["d_loss"]) == 5 and len(run.metric_history["g_loss"]) == 5


def test_noise_comes_from_its_philox_stream_and_advances_every_step():
    run = GANRun(SHORT, device="reference", steps=3)
    per = {n: st.info["rng_advance"]["noise"] for n, st in run.steps.items()}
    assert per == {"discriminator": 2 * 32 * 8, "generator": 2 * 32 * 8}      # Box-Muller: two words a value
    # the discriminator's dropout has its own stream, named by network; it draws for real and fake
    # batches in its own step, and for the fakes in the generator's step (the discriminator trains in
    # train mode, frozen but not in eval mode)
    drop = "discriminator/dropout/4.dropout"
    assert run.steps["discriminator"].info["rng_advance"][drop] == 2 * 32 * 64
    assert run.steps["generator"].info["rng_advance"] == {"noise": 2 * 32 * 8, drop: 32 * 64}
    run.d_steps = 2
    list(run)
    assert run.gen.positions["noise"] == 3 * (2 * per["discriminator"] + per["generator"])
    before = dict(run.gen.positions)
    s1, s2 = run.sample(5), run.sample(5)
    assert not np.array_equal(s1, s2) and run.gen.positions["noise"] == before["noise"]
    assert run.gen.positions["sample"] == before.get("sample", 0) + 2 * 2 * 5 * 8


RESUME = r'''
import json, sys
from scellis_jupyter.run import prepare_resume
run = prepare_resume(sys.argv[1], store=sys.argv[2], device=sys.argv[3])
run.run_to_end()
print(json.dumps({"w": {k: v.tolist() for k, v in run.weights().items()},
                  "s": {f"{p}.{k}": v.tolist() for p, d in run.optimizer_state().items() for k, v in d.items()},
                  "loss": run.loss_history, "steps": run.step, "rng": run.gen.state_dict(),
                  "updates": run.updates, "hist": run.metric_history}))
'''


@pytest.mark.parametrize("device", ["reference", pytest.param("wgpu", marks=pytest.mark.skipif(
    WG is None and not os.environ.get("CI"), reason="no wgpu adapter"))])
def test_exact_resume_in_a_new_process(tmp_path, run_python, device):
    spec = SHORT.replace("steps = 40", "steps = 16")          # 10 batches per epoch: crosses epochs
    whole = GANRun(spec, device=device)
    for r in whole:
        if r.step == 3:
            whole.d_steps = 2                                   # user code changed the balance
    first = GANRun(spec, device=device, store=tmp_path / "s", steps=5)
    for r in first:
        if r.step == 3:
            first.d_steps = 2
    ck = first.checkpoints[-1]
    c = first.store.load_checkpoint(ck)
    assert {k.split("/")[0] for k in c.weights} == {"generator", "discriminator"}
    assert {k.split("/")[0] for k in c.optimizer_state} == {"generator", "discriminator"}
    assert all(set(v) == {"m", "v"} for v in c.optimizer_state.values())
    assert c.rng_state["positions"]["noise"] > 0 and c.step == 5
    r = run_python(RESUME, ck[:12], str(tmp_path / "s"), device, SCELLIS_DEVICE=device)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["steps"] == 16 and got["loss"] == whole.loss_history
    assert got["updates"] == whole.updates and got["rng"] == whole.gen.state_dict()
    for k, v in whole.weights().items():
        assert np.array_equal(np.asarray(got["w"][k], np.float32), v), k
    for p, d in whole.optimizer_state().items():
        for k, v in d.items():
            assert np.array_equal(np.asarray(got["s"][f"{p}.{k}"], np.float32), v), (p, k)
    assert got["hist"] == whole.metric_history


def test_red_plan_is_refused_before_compute_and_recorded(tmp_path):
    p = sc.plan(SHORT, device="reference")
    with pytest.raises(sc.ScellisError) as e:
        GANRun(SHORT, device="reference", store=tmp_path / "s", memory=p.peak_bytes // 2)
    assert e.value.diagnostic.code == "plan-red" and "batch size" in e.value.diagnostic.hint
    from scellis_jupyter.store import Store, list_runs
    (rec,) = list_runs(Store.open(tmp_path / "s"))
    assert rec.state == "refused"


def test_plan_breakdown_counts_both_networks_and_sums_to_the_peak():
    spec = sc.Spec.from_text(RING)
    p = sc.plan(spec, device="reference")
    n = {net: sum(int(np.prod(q.shape)) for q in g.params) for net, g in spec.graphs.items()}
    assert n == {"generator": 8 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2, "discriminator": 2 * 64 + 64 + 64 * 64 + 64 + 65}
    assert p.breakdown["parameters"] == 4 * (n["generator"] + n["discriminator"])
    assert p.breakdown["optimizer_state"] == 2 * 4 * (n["generator"] + n["discriminator"])   # Adam m and v
    assert sum(p.breakdown.values()) == p.peak_bytes and p.breakdown["activations"] > 0
    assert set(p.networks) == {"generator", "discriminator"} and p.dispatches > 100
    for net, d in p.networks.items():
        assert d["parameter_bytes"] == 4 * n[net] and d["step_peak_bytes"] < p.peak_bytes
    assert "networks" in p.table() and json.dumps(p.to_json())
    small = sc.plan(spec, device="reference", memory=int(p.peak_bytes * 0.9))
    (fix,) = small.fixes
    assert fix.kind == "batch_size" and fix.settings["batch_size"] < 128 and fix.peak_bytes <= 0.8 * small.capacity_bytes


def test_one_model_and_two_model_loops_refuse_each_other():
    with pytest.raises(sc.ScellisError, match="GANRun"):
        Run(SHORT, device="reference")
    with pytest.raises(sc.ScellisError, match="not a GAN"):
        GANRun('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n', device="reference")
    run = GANRun(SHORT, device="reference", steps=1)
    with pytest.raises(sc.ScellisError, match="no validation loss"):
        run.evaluate()
    with pytest.raises(sc.ScellisError, match="run.generate"):
        run.predict(np.zeros((2, 2)))
    with pytest.raises(sc.ScellisError, match=r"noise must have shape \[n, 8\]"):
        run.generate(np.zeros((3, 4)))
    run.d_steps = run.g_steps = 0
    with pytest.raises(sc.ScellisError, match="does nothing"):
        list(run)
