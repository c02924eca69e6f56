"""plan.explain: the stage explorer's data is the training step that runs: its schedule has forward, backward
and update kernels, each kernel's WGSL is the text the wgpu backend compiles when it trains the spec, and the
arena drawn over the schedule is the plan's (no two live values overlap; the live peak is the worst step's)."""
import itertools
import random

import scellis_jupyter as sc
from scellis_jupyter.plan.explain import explain, node_of, phase_of

from fixtures.devices import WG, needs_wgpu


def _spec(features: int) -> str:
    # a size no other test uses: this Program is recorded (every pipeline asked for) on its first step here
    return f"""
name = "explain-mlp"
[data]
dataset = "synthetic_classification"
n_rows = 96
n_features = {features}
n_classes = 3
[model]
nodes = [{{ name = "fc1", op = "linear", out = 24 }}, {{ name = "act1", op = "relu" }},
         {{ name = "head", op = "linear", out = 3 }}]
[recipe]
optimizer = {{ name = "adamw", lr = 1e-3 }}
batch_size = 16
determinism = "debug"
"""


def test_phases_and_nodes_of_scopes():
    assert [phase_of(s) for s in ("fc1", "loss", "loss/bwd", "fc1/bwd", "optimizer", "guard", "clip")] == \
        ["forward", "forward", "backward", "backward", "update", "update", "update"]
    ids = ["block", "block.attn", "head"]
    assert node_of("block.attn.q/bwd", ids) == "block.attn" and node_of("block.mlp", ids) == "block"
    assert node_of("loss/bwd", ids) == "loss" and node_of("guard", ids) == "optimizer" and node_of("x", ids) is None


def _check_arena(pl: dict, steps: int) -> None:
    """Offsets and lifetimes as the plan's arena: inside it, no overlap while both live, the peak the worst step."""
    vals = pl["values"]
    assert vals and all(0 <= v["offset"] and v["offset"] + v["size"] <= pl["arena_bytes"] for v in vals)
    assert all(0 <= v["start"] <= v["end"] < steps for v in vals)
    for a, b in itertools.combinations(vals, 2):
        if a["start"] <= b["end"] and b["start"] <= a["end"]:
            assert a["offset"] + a["size"] <= b["offset"] or b["offset"] + b["size"] <= a["offset"], (a, b)
    live = [sum(v["size"] for v in vals if v["start"] <= s <= v["end"]) for s in range(steps)]
    assert max(live) == pl["live_peak_bytes"] == live[pl["live_peak_step"]]
    assert pl["live_peak_bytes"] <= pl["arena_bytes"] <= pl["peak_bytes"]
    assert sum(pl["breakdown"].values()) == pl["peak_bytes"]


@needs_wgpu
def test_kernels_are_the_wgsl_the_backend_compiles(monkeypatch):
    text = _spec(random.Random().randrange(40, 90))
    d = explain(text, device="wgpu")
    pr, launches, kernels = d["program"], d["launches"], d["kernels"]
    assert d["device"]["backend"] == "wgpu" and d["device"]["note"] is None
    assert [n["id"] for n in d["graph"]["nodes"]] == ["fc1", "act1", "head"]
    # the schedule: forward, then backward, then the update, each with its kernels
    phases = [r["phase"] for r in pr["steps"]]
    assert phases == sorted(phases, key=["forward", "backward", "update"].index)
    for ph in ("forward", "backward", "update"):
        assert any(r["launches"] for r in pr["steps"] if r["phase"] == ph), ph
    assert {r["node"] for r in pr["steps"]} == {"fc1", "act1", "head", "loss", "optimizer"}
    assert sorted(i for r in pr["steps"] for i in r["launches"]) == list(range(len(launches)))
    assert all(launches[i]["step"] == r["pos"] for r in pr["steps"] for i in r["launches"])
    assert {k["name"] for k in kernels} >= {"matmul", "reduce"}
    assert all(k["wgsl"].count("@compute") == 1 and "fn main" in k["wgsl"] for k in kernels)
    assert sum(k["launches"] for k in kernels) == len(launches)
    # every arena binding is a value live at that step; every leaf binding names its leaf
    for ln in launches:
        for b in ln["bindings"]:
            if b["buffer"].startswith("arena"):
                v = next(v for v in d["plan"]["values"] if v["value"] == b["value"])
                assert v["start"] <= ln["step"] and ln["first"] <= v["end"], (ln, v)
                assert v["offset"] <= b["offset"] < v["offset"] + v["size"]
            elif b["buffer"].startswith("leaf:"):
                assert b["leaf"] in {lf["name"] for lf in pr["leaves"]}
    _check_arena(d["plan"], len(pr["steps"]))

    # train one step of the same spec on wgpu: each pipeline it compiles is asked for with the same text
    cls = type(WG.impl)                 # the run's backend is an instance of its own
    asked: dict[str, str] = {}
    real = cls.pipeline

    def pipeline(self, key, source):
        asked[key] = self.webgpu.prelude(source() if callable(source) else source)
        return real(self, key, source)
    monkeypatch.setattr(cls, "pipeline", pipeline)
    run = sc.Run(text, device="wgpu", steps=1)
    assert run.plan.program_hash == pr["hash"]
    for _ in run:
        pass
    for k in kernels:
        assert asked.get(k["key"]) == k["wgsl"], k["key"]


def test_on_the_reference_device_the_program_has_no_wgsl():
    d = explain(_spec(17), device="reference")
    assert d["device"]["backend"] == "reference" and not d["kernels"] and not d["launches"]
    assert "not WGSL" in d["device"]["note"]
    assert {r["phase"] for r in d["program"]["steps"]} == {"forward", "backward", "update"}
    _check_arena(d["plan"], len(d["program"]["steps"]))

