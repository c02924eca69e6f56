"""Step options the planner's fixes use, checked by running the Programs they build.

Activation checkpointing must give bit-identical results to the plain step (same kernels on the same
values, dropout replayed from the same Philox positions) while planning a lower peak; sharding and
relay must partition the parameters and, composed, equal the single-device step bit for bit on the
reference backend; mixed-f16 keeps f32 master weights, skips an update whose gradients overflow, and
stays within f16 rounding (rtol 2e-2 on the update) of the f32 step.
"""
from __future__ import annotations

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter import catalog
from scellis_jupyter.plan.plan import step_peak
from scellis_jupyter.program.training import StepOptions, build_train_step
from scellis_jupyter.executor import run_numpy

from fixtures import spec_text

BLOCKS = spec_text("blocks", batch_size=8)

MLP = spec_text("mlp_tanh")


@pytest.fixture(scope="module")
def ref():
    return sc.device("reference")


def feeds_for(step, seed=0, scale=1024.0, spec_params=None):
    rng = np.random.default_rng(seed)
    out = {}
    for leaf in step.leaves:
        n = leaf.node
        base = leaf.name.removesuffix(".master")
        if leaf.role in ("parameter", "master_weights"):
            r = np.random.default_rng(abs(hash((seed, base))) % 2**32) if spec_params is None else None
            a = spec_params[base] if spec_params is not None else r.standard_normal(n.shape) * 0.2
        elif leaf.name == "lr":
            a = 1e-2
        elif leaf.name == "step":
            a = 3.0
        elif leaf.name == "loss_scale":
            a = scale
        elif leaf.name.startswith("rng:"):
            a = np.array([7, 0], np.uint32)
        elif leaf.role == "optimizer_state":
            a = np.abs(rng.standard_normal(n.shape)) * 0.01
        elif n.dtype == "i32":
            a = rng.integers(0, int(step.info.get("classes") or 10), size=n.shape)
        else:
            a = rng.standard_normal(n.shape)
        out[leaf.name] = np.asarray(a)
    return out


def params_of(spec, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal(p.shape) * 0.2 for p in spec.graph.params}


def test_checkpointing_is_bit_identical_and_lowers_the_planned_peak(ref):
    spec = sc.Spec.from_text(BLOCKS)
    plain = build_train_step(spec, 8, "reference", "debug")
    ck = build_train_step(spec, 8, "reference", "debug", options=StepOptions(checkpointing="activations", segment=1))
    assert ck.info["recompute"]["replayed_nodes"] > 0
    feeds = feeds_for(plain, spec_params=params_of(spec))
    a, b = run_numpy(plain, feeds, ref.impl), run_numpy(ck, feeds, ref.impl)
    assert set(a) == set(b)
    for k in a:   # dropout masks replayed from the same Philox positions: exactly the same numbers
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    p_plain, p_ck = step_peak(plain, ref.impl)[0], step_peak(ck, ref.impl)[0]
    assert p_ck < 0.8 * p_plain, (p_ck, p_plain)


def test_checkpointing_fix_is_a_replan_and_shows_its_extra_compute(ref):
    spec = sc.Spec.from_text(BLOCKS.replace("batch_size = 8", "batch_size = 32"))
    full = sc.plan(spec, device="reference")
    tight = sc.plan(spec, device="reference", memory=int(full.peak_bytes * 0.95))
    (fix,) = [f for f in tight.fixes if f.kind == "checkpointing"]
    assert fix.settings["extra_compute"] > 0 and "% compute" in fix.description
    again = sc.plan(spec, device="reference", memory=int(full.peak_bytes * 0.95),
                    options=StepOptions(checkpointing="activations", segment=fix.settings["segment"]))
    assert again.peak_bytes == fix.peak_bytes < full.peak_bytes
    from scellis_jupyter.executor import measure_step
    assert measure_step(again)["measured_peak_bytes"] == again.peak_bytes


def test_mixed_f16_counts_master_weights_and_matches_f32_within_f16_rounding(ref):
    spec = sc.Spec.from_text(MLP)
    n = sum(int(np.prod(p.shape)) for p in spec.graph.params)
    p32 = sc.plan(spec, device="reference")
    p16 = sc.plan(spec, device="reference", options=StepOptions(precision="mixed-f16"))
    assert p16.breakdown["parameters"] == 2 * n and p16.breakdown["master_weights"] == 4 * n
    assert p16.breakdown["optimizer_state"] == p32.breakdown["optimizer_state"]
    from scellis_jupyter.executor import measure_step
    assert measure_step(p16)["measured_peak_bytes"] == p16.peak_bytes
    st32 = build_train_step(spec, 16, "reference", "debug")
    st16 = build_train_step(spec, 16, "reference", "debug", options=StepOptions(precision="mixed-f16"))
    params = {k: v.astype(np.float16).astype(np.float64) for k, v in params_of(spec).items()}
    f32 = feeds_for(st32, spec_params=params)
    f16 = feeds_for(st16, spec_params=params)
    a, b = run_numpy(st32, f32, ref.impl), run_numpy(st16, f16, ref.impl)
    assert bool(b["finite"])
    np.testing.assert_allclose(b["loss"], a["loss"], rtol=2e-3)
    for name in st32.param_names:
        da = a[f"param:{name}"] - f32[name]
        db = b[f"master:{name}"] - f16[f"{name}.master"]
        np.testing.assert_allclose(db, da, rtol=2e-2, atol=2e-4, err_msg=name)
        assert b[f"param:{name}"].dtype == np.float16
        np.testing.assert_array_equal(b[f"param:{name}"], b[f"master:{name}"].astype(np.float16))


def test_mixed_f16_skips_the_update_when_the_scaled_gradient_overflows(ref):
    spec = sc.Spec.from_text(MLP)
    st = build_train_step(spec, 16, "reference", "debug", options=StepOptions(precision="mixed-f16"))
    f = feeds_for(st, scale=2.0 ** 40, spec_params=params_of(spec))
    out = run_numpy(st, f, ref.impl)
    assert not bool(out["finite"])
    for name in st.param_names:
        np.testing.assert_array_equal(out[f"master:{name}"], f[f"{name}.master"].astype(np.float32))
        for k in ("m", "v"):
            np.testing.assert_array_equal(out[f"state:{name}.{k}"], f[f"{name}.{k}"].astype(np.float32))


def test_sharded_optimizer_state_partitions_parameters_and_updates_match(ref):
    spec = sc.Spec.from_text(MLP)
    whole = build_train_step(spec, 16, "reference", "debug")
    feeds = feeds_for(whole, spec_params=params_of(spec))
    want = run_numpy(whole, feeds, ref.impl)
    seen: list[str] = []
    for rank in range(3):
        st = build_train_step(spec, 16, "reference", "debug", options=StepOptions(shard=(rank, 3)))
        assert {l.name.rsplit(".", 1)[0] for l in st.leaves
                if l.role == "optimizer_state"} <= set(st.info["owned"])
        seen += st.info["owned"]
        got = run_numpy(st, {l.name: feeds[l.name] for l in st.leaves}, ref.impl)
        for k, v in got.items():
            if k.startswith(("param:", "state:", "loss")):
                np.testing.assert_array_equal(v, want[k], err_msg=k)
        others = [k for k in got if k.startswith("grad:")]
        assert sorted(k[5:] for k in others) == sorted(set(whole.param_names) - set(st.info["owned"]))
    assert sorted(seen) == sorted(whole.param_names)


def test_layer_relay_stages_compose_to_the_single_device_step(ref):
    spec = sc.Spec.from_text(MLP.replace('{ op = "dropout", p = 0.1 },\n', ""))
    whole = build_train_step(spec, 16, "reference", "debug")
    feeds = feeds_for(whole, spec_params=params_of(spec))
    want = run_numpy(whole, feeds, ref.impl)
    s0 = build_train_step(spec, 16, "reference", "debug", options=StepOptions(relay=(0, 2)))
    s1 = build_train_step(spec, 16, "reference", "debug", options=StepOptions(relay=(1, 2)))
    assert sorted(s0.param_names + s1.param_names) == sorted(whole.param_names)
    assert not set(s0.param_names) & set(s1.param_names)
    # forward of stage 0 needs the gradient stage 1 sends back: run stage 0 once for the activation
    f0 = {l.name: feeds.get(l.name) for l in s0.leaves}
    f0["grad_out"] = np.zeros(next(l.node.shape for l in s0.leaves if l.name == "grad_out"))
    act = run_numpy(s0, f0, ref.impl)["act_out"]
    f1 = {l.name: feeds.get(l.name, None) for l in s1.leaves}
    f1["act_in"] = act
    o1 = run_numpy(s1, f1, ref.impl)
    f0["grad_out"] = o1["grad_in"]
    o0 = run_numpy(s0, f0, ref.impl)
    np.testing.assert_allclose(o1["loss"], want["loss"], rtol=1e-6)
    for o in (o0, o1):
        for k, v in o.items():
            if k.startswith(("param:", "state:")):
                np.testing.assert_allclose(v, want[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_bad_options_are_diagnostics():
    with pytest.raises(sc.ScellisError, match="(?s)checkpointing 'activation'.*did you mean 'activations'"):
        StepOptions(checkpointing="activation")
    with pytest.raises(sc.ScellisError, match="shard"):
        StepOptions(shard=(3, 2))
    spec = sc.Spec.from_text(MLP)
    with pytest.raises(sc.ScellisError, match="relay stages|places to cut"):
        build_train_step(spec, 4, "reference", "debug", options=StepOptions(relay=(0, 50)))


def test_options_round_trip_through_their_json_description():
    import json
    o = StepOptions(checkpointing="activations", segment=2, precision="mixed-f16", shard=(1, 4), relay=(0, 2),
                    peft=(("method", "lora"), ("rank", 4), ("targets", ("q", "v"))), accum=3, ema=True,
                    data="device")
    back = StepOptions.from_description(json.loads(json.dumps(o.describe())))
    assert back == o and hash(back) == hash(o)
    assert StepOptions.from_description(StepOptions().describe()) == StepOptions()
