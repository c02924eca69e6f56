"""sc.plan: the peak is the step Program's allocation plan (measured == predicted), verdicts, fixes, CLI."""
import json
import os

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.executor import measure_step
from scellis_jupyter.plan.plan import GREEN_HEADROOM

from fixtures import spec_text
from fixtures.devices import WG


MLP = spec_text("plan_mlp")

CNN = spec_text("plan_cnn")

TRANSFORMER = spec_text("plan_char_transformer")

SPECS = {"mlp": MLP, "cnn": CNN, "transformer": TRANSFORMER}


def _spec(text):
    return sc.Spec.from_text(text)


@pytest.mark.parametrize("name", list(SPECS))
def test_measured_peak_equals_predicted_on_reference(name):
    p = sc.plan(_spec(SPECS[name]), device="reference")
    m = measure_step(p)
    assert m["measured_peak_bytes"] == p.peak_bytes, m
    assert m["step_peak_bytes"] == p.extras["step_peak"] < p.peak_bytes        # evaluation adds to the step
    assert np.isfinite(m["loss"]) and m["loss"] > 0
    assert sum(p.breakdown.values()) == p.peak_bytes
    # the host's real peak (tracemalloc) exceeds the engine's allocations by numpy's temporaries, which the
    # plan states as a bound beside the peak
    assert p.peak_bytes < m["host_peak_bytes"] <= p.peak_bytes + p.extras["host temporaries bound"], m
    assert "host bound" in p.table()


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_measured_peak_equals_predicted_on_wgpu(name):
    p = sc.plan(_spec(SPECS[name]), device=WG)
    m = measure_step(p, WG)
    assert m["measured_peak_bytes"] == p.peak_bytes, m
    # independently: every byte create_buffer was asked for, staging buffers of readbacks included
    assert m["device_buffer_peak_bytes"] == p.peak_bytes, m
    assert p.extras["uniform_params"] > 0 and p.breakdown["readback"] > 0
    ref = measure_step(sc.plan(_spec(SPECS[name]), device="reference"))
    assert m["loss"] == pytest.approx(ref["loss"], rel=1e-4)      # same step, same synthetic data


def test_breakdown_counts_parameters_and_declared_optimizer_state():
    p = sc.plan(_spec(MLP), device="reference")
    n = 64 * 128 + 128 + 128 * 10 + 10
    assert p.breakdown["parameters"] == 4 * n
    assert p.breakdown["optimizer_state"] == 2 * 4 * n      # AdamW: m and v, f32 each
    assert p.breakdown["data"] == 64 * 64 * 4 + 64 * 4      # x (f32) and integer labels
    assert p.breakdown["activations"] > 0


def test_peak_grows_with_batch_and_verdicts_follow_capacity():
    s = _spec(MLP)
    small, big = sc.plan(s, device="reference", batch_size=8), sc.plan(s, device="reference", batch_size=512)
    assert big.peak_bytes > small.peak_bytes
    roomy = sc.plan(s, device="reference", memory=10 * big.peak_bytes)
    # the verdict answers "does it fit" alone; the device line says it is the slow CPU path
    assert roomy.verdict == "green" and roomy.warnings == []
    assert "the CPU" in roomy.device_note and "not a GPU" in roomy.device_note and "slow" in roomy.device_note
    assert f"  device    {roomy.device_note}" in roomy.table() and "verdict   GREEN" in roomy.table()
    tight = sc.plan(s, device="reference", memory=int(big.peak_bytes * 1.1), batch_size=512)
    assert tight.verdict == "yellow" and tight.warnings[0].startswith("little headroom")
    red = sc.plan(s, device="reference", memory=big.peak_bytes - 1, batch_size=512)
    assert red.verdict == "red" and not red.fits
    assert red.capacity_source == "declared"


def test_a_defaulted_metric_is_said_in_the_plan_and_planned():
    """plan_mlp sets no metrics: as a classification recipe it gets accuracy, the plan says so, and plans the
    validation passes it brings."""
    p = sc.plan(_spec(MLP), device="reference")
    assert any(n.startswith("metrics: accuracy") and "default" in n for n in p.notes), p.notes
    assert "note: metrics: accuracy" in p.table()
    assert p.evaluation == {"parts": None, "in_loop": True}
    chosen = sc.plan(_spec(MLP.replace("clip_grad_norm", 'metrics = ["f1"]\nclip_grad_norm')), device="reference")
    assert not any(n.startswith("metrics:") for n in chosen.notes)


def test_batch_fix_is_a_replanned_peak_and_the_largest_that_fits_with_headroom():
    s = _spec(MLP)
    cap = sc.plan(s, device="reference", batch_size=256).peak_bytes     # batch 256 is red here
    red = sc.plan(s, device="reference", memory=cap - 1, batch_size=256)
    assert red.verdict == "red"
    (fix,) = [f for f in red.fixes if f.kind == "batch_size"]
    b = fix.settings["batch_size"]
    assert 1 <= b < 256
    at_b = sc.plan(s, device="reference", memory=cap - 1, batch_size=b)
    assert at_b.peak_bytes == fix.peak_bytes <= GREEN_HEADROOM * (cap - 1)
    above = sc.plan(s, device="reference", memory=cap - 1, batch_size=b + 1)
    assert above.peak_bytes > GREEN_HEADROOM * (cap - 1)


def test_capacity_honesty_when_nothing_fits():
    s = _spec(MLP)
    one = sc.plan(s, device="reference", batch_size=1)
    p = sc.plan(s, device="reference", memory=one.peak_bytes // 2)
    assert p.verdict == "red"
    assert p.fixes[0].kind == "batch_size" and p.fixes[0].settings["batch_size"] is None
    # the other fixes each lower the peak; none fits alone here, so each is offered red
    assert all(f.peak_bytes < p.peak_bytes for f in p.fixes[1:])
    text = p.fixes[0].description
    assert "no batch size fits" in text and "not one device's memory" in text
    err = p.refusal()
    assert err.diagnostic.code == "plan-red" and "refused before any compute" in str(err)


def test_plan_cli(tmp_path, run_python):
    f = tmp_path / "mlp.toml"
    f.write_text(MLP)
    r = run_python(None, "plan", str(f), "--device", "reference", module="scellis_jupyter.cli")
    assert r.returncode == 0, r.stderr
    assert "verdict   GREEN" in r.stdout and "optimizer_state" in r.stdout and "device    the CPU" in r.stdout
    r = run_python(None, "plan", str(f), "--device", "reference", "--json", "--batch-size", "32",
                   module="scellis_jupyter.cli")
    d = json.loads(r.stdout)
    assert d["batch_size"] == 32 and d["verdict"] == "green" and set(d["breakdown"]) >= {"parameters", "activations"}
    assert "not a GPU" in d["device_note"]
    assert d["peak_bytes"] == sum(d["breakdown"].values())
    r = run_python(None, "plan", str(f), "--device", "reference", "--memory", "100KB", module="scellis_jupyter.cli")
    assert r.returncode == 3 and "error[plan-red]" in r.stderr and "verdict   RED" in r.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(MLP.replace('op = "relu"', 'op = "rleu"'))
    r = run_python(None, "plan", str(bad), "--device", "reference", module="scellis_jupyter.cli")
    line = MLP.splitlines().index('  { op = "relu" },') + 1
    assert r.returncode == 2 and f"{bad}:{line}:10:" in r.stderr and "did you mean 'relu'" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_python(None, "plan", str(tmp_path / "missing.toml"), module="scellis_jupyter.cli")
    assert r.returncode == 2 and "missing.toml" in r.stderr and "Traceback" not in r.stderr


def test_optimizer_state_comes_from_the_entrys_declaration_int8adam_counts_bytes():
    from scellis_jupyter import catalog
    adamw = sc.plan(_spec(MLP), device="reference")
    i8 = sc.plan(_spec(MLP.replace('name = "adamw", lr = 3e-3, weight_decay = 0.01', 'name = "int8adam", lr = 3e-3')),
                 device="reference")
    opt = catalog.make("optimizer", "int8adam")
    shapes = [(128, 64), (128,), (10, 128), (10,)]
    declared = sum(d.nbytes for s in shapes for d in opt.state(s, "f32"))
    assert i8.breakdown["optimizer_state"] == declared
    assert declared < 0.5 * adamw.breakdown["optimizer_state"]
    assert i8.breakdown["parameters"] == adamw.breakdown["parameters"]
    m = measure_step(i8)
    assert m["measured_peak_bytes"] == i8.peak_bytes


@pytest.mark.skipif(WG is None and not os.environ.get("CI"), reason="no wgpu adapter")
@pytest.mark.parametrize("options", [{"checkpointing": "activations", "segment": 1}, {"precision": "mixed-f16"}],
                         ids=["checkpointing", "mixed-f16"])
def test_fix_options_measured_equals_predicted_on_wgpu(options):
    from scellis_jupyter.program.training import StepOptions
    if options.get("precision") == "mixed-f16" and not WG.impl.has_f16:
        pytest.skip("adapter lacks shader-f16")
    opts = StepOptions(**options)
    p = sc.plan(_spec(TRANSFORMER), device=WG, options=opts)
    m = measure_step(p, WG)
    assert m["measured_peak_bytes"] == p.peak_bytes, m
    ref = measure_step(sc.plan(_spec(TRANSFORMER), device="reference", options=opts))
    tol = 1e-4 if "checkpointing" in options else 1e-2
    assert m["loss"] == pytest.approx(ref["loss"], rel=tol)


def test_adapter_fixes_are_replans_with_their_trainable_factor():
    from scellis_jupyter.program.training import StepOptions
    s = _spec(MLP)
    full = sc.plan(s, device="reference")
    tight = sc.plan(s, device="reference", memory=int(full.peak_bytes * 0.9))
    fixes = {f.settings["peft"]["method"]: f for f in tight.fixes if f.kind == "adapters"}
    assert set(fixes) == {"lora", "qlora"}
    base = 64 * 128 + 128 + 128 * 10 + 10
    adapters = 8 * (64 + 128) + 8 * (128 + 10)            # A (r x in) and B (out x r) per linear weight
    for method, fix in fixes.items():
        assert fix.settings["factor"] == pytest.approx(adapters / (base + adapters))
        again = sc.plan(s, device="reference", options=StepOptions(peft=(("method", method), ("rank", 8))))
        assert again.peak_bytes == fix.peak_bytes < full.peak_bytes
        assert measure_step(again)["measured_peak_bytes"] == again.peak_bytes
    assert fixes["qlora"].peak_bytes < fixes["lora"].peak_bytes


def test_stream_data_fix_is_a_replan_of_the_streamed_step():
    dev_spec = _spec(MLP.replace('dataset = "digits"', 'dataset = "digits"\nplacement = "device"'))
    streamed = sc.plan(_spec(MLP), device="reference")
    resident = sc.plan(dev_spec, device="reference")
    held = 1797 * 64 * 4 + 1797 * 4                      # every digits row (f32 pixels, i32 label) stays
    batch = 64 * 64 * 4 + 64 * 4
    assert resident.breakdown["data"] == held + 64 * 4   # + the batch's row ids
    assert streamed.breakdown["data"] == batch
    cap = int(streamed.peak_bytes / GREEN_HEADROOM) + 1  # the streamed step fits with headroom, resident not
    red = sc.plan(dev_spec, device="reference", memory=cap)
    assert red.verdict in ("yellow", "red") and resident.peak_bytes > GREEN_HEADROOM * cap
    (fix,) = [f for f in red.fixes if f.kind == "stream_data"]
    assert fix.peak_bytes == streamed.peak_bytes and fix.settings == {"placement": "stream"}
    assert str(held) in fix.description
    assert not any(f.kind == "stream_data" for f in sc.plan(_spec(MLP), device="reference", memory=cap).fixes)


def test_no_batch_fits_names_the_device_resident_dataset_among_what_stays():
    dev_spec = _spec(MLP.replace('dataset = "digits"', 'dataset = "digits"\nplacement = "device"'))
    one = sc.plan(dev_spec, device="reference", batch_size=1)
    p = sc.plan(dev_spec, device="reference", memory=one.peak_bytes - 1)
    (fix,) = [f for f in p.fixes if f.kind == "batch_size"]
    assert "no batch size fits" in fix.description and "device-resident dataset" in fix.description
    assert any(f.kind == "stream_data" for f in p.fixes)
    plain = sc.plan(_spec(MLP), device="reference", memory=sc.plan(_spec(MLP), device="reference",
                                                                   batch_size=1).peak_bytes - 1)
    assert "device-resident" not in plain.fixes[0].description
