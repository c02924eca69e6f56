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
# # A character-level transformer on Python's own documentation
#
# The text of CPython's `pydoc_data.topics` (the help pages behind `help("if")`), read as characters of
# a fixed 96-token vocabulary, cut into windows of 32; a two-block causal transformer learns to predict
# the next character. We compare its validation cross-entropy with what counting characters gives
# (unigram and bigram models fitted on the training split), then let it write, sampling characters
# with a temperature from its own Philox stream, so the same seed writes the same text everywhere.
#
# Run it with `python notebooks/char_transformer.py`. Environment: `SCELLIS_EXAMPLE_STEPS` (steps to
# run, for a quick look), `SCELLIS_DEVICE` (`reference` or `wgpu`), `SCELLIS_STORE` (default `.scellis`).

# %%
import json
import math
import os

import numpy as np

import scellis_jupyter as sc

SPEC = """
name = "char-transformer"

[data]
dataset = "pydoc_topics"
seq_len = 32

[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 32 },
  { op = "positional_embedding", max_len = 32 },
  { op = "transformer_block", heads = 4, causal = true },
  { op = "transformer_block", heads = 4, causal = true },
  { op = "layer_norm" },
  { op = "linear", out = 96 },
]

[recipe]
optimizer = { name = "adamw", lr = 5e-3, weight_decay = 0.01 }
scheduler = { name = "warmup_cosine", warmup_steps = 50 }
steps = 1500
batch_size = 32
clip_grad_norm = 1.0
metrics = ["perplexity"]
eval_every = 100
determinism = "debug"
seed = 0
"""

spec = sc.Spec.from_text(SPEC, source="char_transformer.toml")
budget = os.environ.get("SCELLIS_EXAMPLE_STEPS")
steps = int(budget) if budget else None
store = os.environ.get("SCELLIS_STORE", ".scellis")
print(spec.graph.summary())

# %% [markdown]
# ## The plan

# %%
device = sc.device()
plan = sc.plan(spec, device=device)
print(plan.table())

# %% [markdown]
# ## Baselines from the data
# Cross-entropy (nats per character) of the validation text under character counts of the training
# text: unigram (each character's frequency) and bigram (given the previous character), add-one smoothed.

# %%
run = sc.Run(spec, device=device, store=store, steps=steps)
text = run.dataset
V = len(text.vocab)
xt, yt = text.read(run.split["train"])
xv, yv = text.read(run.split["val"])
uni = np.bincount(yt.ravel(), minlength=V) + 1.0
uni /= uni.sum()
bi = np.ones((V, V))
np.add.at(bi, (xt.ravel(), yt.ravel()), 1.0)
bi /= bi.sum(1, keepdims=True)
unigram = float(-np.log(uni[yv.ravel()]).mean())
bigram = float(-np.log(bi[xv.ravel(), yv.ravel()]).mean())
print(f"{len(text)} windows of {spec.data['seq_len']} characters; unigram {unigram:.3f} nats "
      f"(perplexity {math.exp(unigram):.1f}), bigram {bigram:.3f} nats (perplexity {math.exp(bigram):.1f})")

# %% [markdown]
# ## Train

# %%
for step in run:
    if step.metrics:
        print(f"step {step.step:5d}  train loss {step.loss:.3f}  lr {step.lr:.2e}  val loss "
              f"{step.metrics['loss']:.3f}  val perplexity {step.metrics['perplexity']:.2f}", flush=True)
res = run.result()
m = res["metrics"]
print(f"validation: {m['val_loss']:.3f} nats (perplexity {m['val_perplexity']:.2f}) against unigram {unigram:.3f} and "
      f"bigram {bigram:.3f}; test: {m['test_loss']:.3f} nats")

# %% [markdown]
# ## Let it write
# Each next character is drawn from softmax(logits / T) by inverting its CDF at a uniform number from
# the Philox stream "sample" of the run's seed; the model sees the last 32 characters.

# %%
def write(prompt: str, n: int = 240, temperature: float = 0.8, seed: int = 0) -> str:
    L = spec.data["seq_len"]
    draws = sc.rng.Generator(seed).stream("sample").uniform((n,))
    ids = [text.vocab.index(c) for c in prompt]
    for u in draws:
        ctx = ids[-L:]
        window = np.zeros((1, L), np.int32)
        window[0, :len(ctx)] = ctx                   # causal: positions after the context do not matter
        logits = run.predict(window)[0, len(ctx) - 1].astype(np.float64) / temperature
        p = np.exp(logits - logits.max())
        p /= p.sum()
        ids.append(int(min(np.searchsorted(np.cumsum(p), u, side="right"), V - 1)))
    return text.decode(ids)


sample = write("The ")
print(sample)

# %%
print(f"{res['steps']} steps on {device.backend} (tier {res['tier']}): measured peak {res['measured_peak_bytes']} "
      f"bytes, planned {res['predicted_peak_bytes']}")
print(f"checkpoint {res['final_checkpoint']} in {store} (run {res['run']})")
print("result:", json.dumps({"steps": res["steps"], "val_loss": m["val_loss"], "val_perplexity": m["val_perplexity"],
                             "test_loss": m["test_loss"], "unigram": unigram, "bigram": bigram,
                             "sample": sample, "measured_peak_bytes": res["measured_peak_bytes"],
                             "planned_peak_bytes": res["predicted_peak_bytes"], "verdict": plan.verdict,
                             "checkpoint": res["final_checkpoint"], "run": res["run"], "store": store}))
