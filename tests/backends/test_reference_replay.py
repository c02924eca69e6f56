"""The reference backend's compiled replay (run_steps) against its own op-by-op dispatch: every output of
several training steps bit for bit (same bytes), over models that exercise fused groups, bool values,
f16 compute, multi-output kernels (attention) and dropout's random bits. The op-by-op path is the oracle
the WGSL kernels are checked against, so the replay must not differ from it in a single bit."""
import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor.executor import execute

MLP = """
name = "replay-mlp"
[data]
dataset = "wine"
standardize = true
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { op = "dropout", p = 0.2 },
         { op = "linear", out = 3 }]
[recipe]
optimizer = { name = "adamw", lr = 1e-2, weight_decay = 0.01 }
batch_size = 16
clip_grad_norm = 1.0
determinism = "debug"
"""

MIXED = MLP.replace('determinism = "debug"', 'determinism = "debug"\nprecision = "mixed-f16"')

TRANSFORMER = """
name = "replay-attention"
[data]
dataset = "pydoc_topics"
seq_len = 8
[model]
nodes = [
  { op = "embedding", vocab = 96, dim = 8 },
  { op = "transformer_block", heads = 2, causal = true },
  { op = "layer_norm" },
  { op = "linear", out = 96 },
]
[recipe]
optimizer = { name = "adam", lr = 1e-3 }
batch_size = 2
determinism = "debug"
"""

CNN = """
name = "replay-cnn"
[data]
dataset = "digits"
input = { shape = [1, 8, 8], dtype = "f32" }
[model]
nodes = [
  { op = "conv2d", out = 4, kernel = 3, padding = 1 },
  { op = "gelu" },
  { op = "max_pool2d", kernel = 2 },
  { op = "flatten" },
  { op = "layer_norm" },
  { op = "linear", out = 10 },
]
[recipe]
optimizer = { name = "sgd", lr = 0.1, momentum = 0.9 }
batch_size = 8
determinism = "debug"
"""


def _outputs(spec: str, replay: bool, steps: int = 6) -> list[list[bytes]]:
    run = sc.Run(sc.Spec.from_text(spec), device="reference")
    run.impl.replay = replay
    got = []
    for _, (x, y) in zip(range(steps), run.loader):
        outs = execute(run.step_prog.program, run._feeds(x, y, 1e-2), run.impl)
        got.append([np.ascontiguousarray(run.impl.to_numpy(o)).tobytes() for o in outs])
        for name, s in zip(run.step_prog.outputs, outs):       # the next step starts from this one's result
            kind, _, rest = name.partition(":")
            if kind in ("param", "state"):
                run.values[rest] = s
            elif kind == "master":
                run.values[f"{rest}.master"] = s
    assert (id(run.step_prog.program) in run.impl._replays) == replay       # the compiled form did run
    return got


@pytest.mark.parametrize("spec", [MLP, MIXED, TRANSFORMER, CNN], ids=["mlp-dropout", "mixed-f16", "attention",
                                                       "cnn-gelu-layernorm"])
def test_replay_is_bit_identical_to_dispatching_op_by_op(spec):
    slow, fast = _outputs(spec, replay=False), _outputs(spec, replay=True)
    assert len(slow) == len(fast) == 6          # the first REPLAY_AFTER run op by op, the rest compiled
    for a, b in zip(slow, fast):
        assert a == b


def test_a_run_on_the_replay_matches_one_op_by_op(tmp_path, monkeypatch):
    """A whole run (steps, evaluation, final metrics) through sc.Run: the same weights hash and losses."""
    from scellis_jupyter.backends import reference
    spec = sc.Spec.from_text(MLP.replace("batch_size = 16", "batch_size = 16\nepochs = 2\nmetrics = [\"accuracy\"]"))
    fast = sc.Run(spec, device="reference").run_to_end()
    monkeypatch.setattr(reference.ReferenceBackend, "run_steps", lambda self, prog, resolve: False)
    slow = sc.Run(spec, device="reference").run_to_end()
    assert fast["weights_hash"] == slow["weights_hash"]
    assert fast["loss_history"] == slow["loss_history"] and fast["metrics"] == slow["metrics"]
