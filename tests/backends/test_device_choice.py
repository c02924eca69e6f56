"""`device("auto")`: a GPU wins without measuring; among CPU-emulated adapters and the numpy reference the
measured (or, failing that, modelled) cheapest wins, and the Device's `choice` and the banner say why.
The decision is tested with injected costs; the probe itself once for real on each backend here."""
import importlib
import json
import math

import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends.device import Cost, Device, choose, measured_cost
from scellis_jupyter.executor.probe import seconds_per_step

devmod = importlib.import_module("scellis_jupyter.backends.device")     # (the package exports a function of that name)

LLVMPIPE = Device("wgpu", "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu-emulated", {}, 1, "system-ram")
REF = Device("reference", "numpy", "reference", {}, 1, "system-ram")
DISCRETE = Device("wgpu", "NVIDIA H200", "discrete", {}, 1, "nvml")
INTEGRATED = Device("wgpu", "Intel Iris Xe", "integrated", {}, 1, "system-ram")


def costs(**by_name):
    def cost(d):
        return by_name[d.name.split()[0]]
    return cost


def test_the_reference_wins_when_it_measures_faster():
    d, why = choose([LLVMPIPE, REF], costs(llvmpipe=Cost(0.061, "probe"), numpy=Cost(0.013, "probe")))
    assert d is REF
    assert "reference:numpy 13.0 ms" in why and "llvmpipe (LLVM 15.0.6, 256 bits) 61.0 ms" in why


def test_the_adapter_wins_when_it_measures_faster():
    d, why = choose([LLVMPIPE, REF], costs(llvmpipe=Cost(0.002, "cached"), numpy=Cost(0.013, "probe")))
    assert d is LLVMPIPE and "measured earlier" in why


def test_a_gpu_always_wins_without_measuring():
    def never(d):
        raise AssertionError("a GPU is chosen without a probe")
    assert choose([DISCRETE, LLVMPIPE, REF], never)[0] is DISCRETE
    assert choose([INTEGRATED, LLVMPIPE, REF], never)[0] is INTEGRATED
    assert choose([INTEGRATED, DISCRETE, REF], never)[0] is DISCRETE
    assert choose([REF], never)[0] is REF


def test_modelled_costs_are_never_mixed_with_measured_ones():
    # the adapter could not be measured: both sides are modelled (llvmpipe 4.7x the reference's time)
    d, why = choose([LLVMPIPE, REF], costs(llvmpipe=Cost(4.7, "model"), numpy=Cost(0.0001, "probe")))
    assert d is REF and "modelled" in why and "ms" not in why


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(devmod, "_CACHE", {})
    monkeypatch.setattr(devmod, "_PROBE", {})
    monkeypatch.setenv("SCELLIS_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_measured_cost_probes_once_per_machine(fresh, monkeypatch):
    calls = []
    devmod.set_probe(lambda d: calls.append(d.name) or 0.005)
    assert measured_cost(REF) == Cost(0.005, "probe") and calls == ["numpy"]
    assert measured_cost(REF) == Cost(0.005, "probe") and calls == ["numpy"]      # this process: remembered
    monkeypatch.setattr(devmod, "_CACHE", {})                                      # a new process
    assert measured_cost(REF) == Cost(0.005, "cached") and calls == ["numpy"]     # this machine: the file
    assert list(json.loads((fresh / "device-costs.json").read_text()).values()) == [0.005]


def test_without_a_probe_the_model_decides(fresh, monkeypatch):
    def broken(d):
        raise RuntimeError("driver says no")
    devmod.set_probe(broken)
    assert measured_cost(LLVMPIPE) == Cost(4.7, "model")
    monkeypatch.setattr(devmod, "_CACHE", {})
    devmod.set_probe(lambda d: 1.0)
    monkeypatch.setenv("SCELLIS_DEVICE_PROBE", "0")
    assert measured_cost(REF) == Cost(1.0, "model")


def test_the_real_probe_on_each_backend():
    for d in sc.devices():
        s = seconds_per_step(d, reps=2)
        assert math.isfinite(s) and 0 < s < 30, (d, s)


def test_auto_and_the_plan_tables_default(run_python, tmp_path):
    show = "import json, scellis_jupyter as sc\nprint(json.dumps(sc.device().to_json(), default=str))"
    for env in ({"SCELLIS_DEVICE": "auto"}, {"SCELLIS_DEVICE": None}):
        r = run_python(show, SCELLIS_CACHE_DIR=tmp_path, **env)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["choice"].startswith("auto:"), d["choice"]
        if len(sc.devices()) > 1 and d["adapter_type"] not in ("discrete", "integrated"):
            assert "a probe step" in d["choice"] and "against" in d["choice"]
            assert "NOT a GPU" in r.stderr and "against" in r.stderr          # the banner says why
    r = run_python(None, "plan", "benchmarks/specs/red_transformer.toml", module="scellis_jupyter.cli",
                   SCELLIS_DEVICE=None, SCELLIS_CACHE_DIR=tmp_path)
    assert r.returncode == 3 and "error[plan-red]" in r.stderr, r.stderr      # [plan] device = "auto" is auto
    r = run_python(None, "plan", "benchmarks/specs/red_transformer.toml", module="scellis_jupyter.cli",
                   SCELLIS_DEVICE="auto", SCELLIS_CACHE_DIR=tmp_path)
    assert r.returncode == 3, r.stderr
