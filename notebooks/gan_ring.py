# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A GAN learns a ring of Gaussians
#
# Two networks in one spec: a generator maps 8-dimensional noise to points in the plane, a discriminator
# scores points as real or generated. The data is the classic mode-coverage test: 8 Gaussians (std 0.1)
# on a circle of radius 2. A generator that collapses onto a few modes is easy to see here, so we count
# the modes it covers, how many of its samples land on one, and the MMD between its samples and
# held-out data, next to the untrained generator.
#
# Run it with `python notebooks/gan_ring.py`. Environment: `SCELLIS_EXAMPLE_STEPS` (rounds to run, for a
# quick look), `SCELLIS_DEVICE` (`reference` or `wgpu`), `SCELLIS_STORE` (where the run record and
# checkpoint go, default `.scellis`).

# %%
import json
import os

import numpy as np

import scellis_jupyter as sc
from scellis_jupyter.data import ring_centers

SPEC = """
name = "gan-ring"

[data]
dataset = "synthetic_ring"          # 8 modes on a circle of radius 2, std 0.1
n_rows = 4000

[model.generator]
input = { shape = [8] }             # the noise it maps: N(0, I) from the Philox stream "noise"
nodes = [
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 2, init = "xavier_uniform" },
]

[model.discriminator]               # its input is the data's example shape: [2]
nodes = [
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 64, init = "xavier_uniform" }, { op = "relu" },
  { op = "linear", out = 1, init = "xavier_uniform" },
]

[recipe]
kind = "gan"
loss = "non_saturating"
noise = "normal"
optimizer = { name = "adam", lr = 2e-3, betas = [0.5, 0.999] }
batch_size = 128
steps = 1200                        # rounds: d_steps discriminator steps, then g_steps generator steps
d_steps = 1
seed = 0
determinism = "debug"
"""

spec = sc.Spec.from_text(SPEC, source="gan_ring.toml")
budget = os.environ.get("SCELLIS_EXAMPLE_STEPS")
rounds = int(budget) if budget else None
store = os.environ.get("SCELLIS_STORE", ".scellis")
print(spec)
for name, graph in spec.graphs.items():
    print(f"\n{name}\n{graph.summary()}")

# %% [markdown]
# ## The plan, before any compute
# Both networks' weights and Adam state stay on the device; the peak is the larger step's arena plus
# that, and it is exactly what the loop will allocate.

# %%
device = sc.device()
plan = sc.plan(spec, device=device)
print(plan.table())

# %% [markdown]
# ## Train: one round per iteration, decisions in user code
# The loop yields both losses and the discriminator's mean logits on real and generated points. If
# the discriminator pulls far ahead (its loss stays low), the next rounds give the generator a second
# step: an ordinary `if` on the numbers the loop reports.

# %%
run = sc.GANRun(spec, device=device, store=store, steps=rounds)
baseline = sc.GANRun(spec, device=device, steps=1).sample(4000)     # the untrained generator (same init)
held_out = run.dataset.read(run.split["test"])[0]


def modes(x, k=8, std=0.1):
    """(modes with >= 2% of the samples within 3 std, fraction of samples within 3 std of a mode)."""
    d = np.linalg.norm(x[:, None, :] - ring_centers(k)[None], axis=2)
    near = d.min(1) < 3 * std
    counts = np.bincount(d.argmin(1)[near], minlength=k)
    return int((counts >= 0.02 * len(x)).sum()), float(near.mean())


def mmd2(x, y, bw=1.0):
    """Unbiased squared MMD with a Gaussian kernel (Gretton et al. 2012)."""
    def k(a, b):
        return np.exp(-((a[:, None, :] - b[None, :, :]) ** 2).sum(-1) / (2 * bw * bw))
    kx, ky, kxy = k(x, x), k(y, y), k(x, y)
    n, m = len(x), len(y)
    return float((kx.sum() - np.trace(kx)) / (n * (n - 1)) + (ky.sum() - np.trace(ky)) / (m * (m - 1))
                 - 2 * kxy.mean())


every = max(1, run.total_steps // 6)
recent = []
for r in run:
    recent = (recent + [r.d_loss])[-20:]
    run.g_steps = 2 if len(recent) == 20 and np.mean(recent) < 0.2 else 1     # the discriminator is winning
    if r.step % every == 0 or r.step == run.total_steps:
        m, q = modes(run.sample(2000))
        print(f"round {r.step:5d}  d_loss {r.d_loss:.3f}  g_loss {r.g_loss:.3f}  D(x) {r.d_real:+.2f}  "
              f"D(G(z)) {r.d_fake:+.2f}  modes {m}/8  on a mode {100 * q:.0f}%", flush=True)

# %% [markdown]
# ## What the generator learned
# Samples against held-out data, and the untrained generator as the baseline.

# %%
samples = run.sample(4000)
(m, q), (mb, qb) = modes(samples), modes(baseline)
mmd, mmd_base = mmd2(samples[:1000].astype(np.float64), held_out), mmd2(baseline[:1000].astype(np.float64), held_out)
print(f"trained:   {m}/8 modes, {100 * q:.1f}% of samples on a mode, MMD^2 {mmd:.4f}, mean {samples.mean(0).round(2)}")
print(f"untrained: {mb}/8 modes, {100 * qb:.1f}% of samples on a mode, MMD^2 {mmd_base:.4f}")


def density(points, size=21, lim=3.0):
    """A character picture of where points fall in [-lim, lim]^2."""
    grid = np.zeros((size, size), int)
    ij = np.clip(((points + lim) / (2 * lim) * size).astype(int), 0, size - 1)
    np.add.at(grid, (size - 1 - ij[:, 1], ij[:, 0]), 1)
    shades = " .:-=+*#%@"
    top = max(grid.max(), 1)
    return "\n".join("".join(shades[min(9, int(9 * c / top + 0.999))] * 2 for c in row) for row in grid)


print("\ngenerated" + " " * 35 + "held-out data")
for a, b in zip(density(samples).splitlines(), density(held_out).splitlines()):
    print(a + "  |  " + b)

# %% [markdown]
# ## The run record
# The final checkpoint holds both networks' weights and optimizer state, the Philox positions (the
# noise stream included) and the loop's place; `sc.resume(run_id)` continues it bit for bit.

# %%
res = run.result()
print(f"{res['steps']} rounds on {device.backend} (tier {res['tier']}): measured peak "
      f"{res['measured_peak_bytes']} bytes, planned {res['predicted_peak_bytes']}")
print(f"checkpoint {res['final_checkpoint']} in {store} (run {res['run']})")
print("result:", json.dumps({"rounds": res["steps"], "modes": m, "on_mode": round(q, 4), "mmd2": round(mmd, 5),
                             "baseline_modes": mb, "baseline_mmd2": round(mmd_base, 5),
                             "measured_peak_bytes": res["measured_peak_bytes"],
                             "planned_peak_bytes": res["predicted_peak_bytes"], "verdict": plan.verdict,
                             "checkpoint": res["final_checkpoint"], "run": res["run"], "store": store}))
