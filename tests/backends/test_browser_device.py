"""The `browser` device without Jupyter: the engine's Programs replayed on the WebGPU of a headless Chromium page
(SwiftShader) through backends/wgpu/browser.py's proxy and js/src/lib/webgpu_executor.js, the page reached by
Playwright (tests/fixtures/browser_page.py). Checked against numpy and the reference path, never ourselves."""
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import scellis_jupyter as sc
from scellis_jupyter.backends import device as devmod
from scellis_jupyter.backends.wgpu import browser
from scellis_jupyter.errors import DeviceError, KernelError

from scellis_jupyter.quickstart import SPEC

from fixtures import browser_page, dawn


def test_no_front_end_is_refused_naming_the_devices(monkeypatch):
    monkeypatch.setattr(browser, "_TRANSPORT", {})
    with pytest.raises(DeviceError) as e:
        sc.device("browser")
    text = str(e.value)
    assert text.startswith("error[device]") and "no front-end is attached" in text
    assert "reference" in text and "available here:" in text


def test_setting_selects_it(monkeypatch):
    monkeypatch.setattr(browser, "_TRANSPORT", {})
    monkeypatch.setenv("SCELLIS_DEVICE", "browser")
    with pytest.raises(DeviceError, match="no front-end is attached"):
        sc.device()


def test_a_spec_asking_for_it_is_refused_before_compute_without_a_page(monkeypatch):
    monkeypatch.setattr(browser, "_TRANSPORT", {})
    with pytest.raises(DeviceError, match="no front-end is attached"):
        sc.plan(SPEC + '\n[plan]\ndevice = "browser"\n')


class _FakePage:
    """Answers a batch with, for each buffer it maps, that buffer's id as bytes (slowly, so threads overlap)."""
    def describe(self):
        return "a fake page"

    def request(self, message, buffers):
        time.sleep(0.005)
        return {"ok": True}, [str(c[1]).encode() for c in message["cmds"] if c[0] == "map"]


def test_readbacks_from_two_threads_on_one_page_device_get_their_own_bytes():
    s = browser._Session(_FakePage(), 1)
    bufs = [browser.Buffer(s, 8, 9) for _ in range(16)]
    got = {}

    def read(b):
        for _ in range(5):
            b.map_sync("READ")
            got.setdefault(b.id, set()).add(bytes(b.read_mapped()))
            b.unmap()
    threads = [threading.Thread(target=read, args=(b,)) for b in bufs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert got == {b.id: {str(b.id).encode()} for b in bufs}


WHY = browser_page.available()


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    with browser_page.page_transport(tmp_path_factory.mktemp("page")) as t:
        yield t


@pytest.fixture
def dev(page, monkeypatch):
    monkeypatch.setattr(browser, "_TRANSPORT", {"t": page})
    return sc.device("browser")


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_device_names_the_page_adapter(dev):
    assert dev.implementation == "browser" and dev.name.startswith("browser ")
    assert "swiftshader" in dev.name                 # Chromium's CPU adapter here
    assert "WebGPU reports no free memory" in dev.memory_source
    p = sc.plan(SPEC, device=dev)
    assert "browser" in p.table() and "WebGPU reports no free memory" in p.table()
    # the bytes a step sends: its batch, 64 rows of 64 f32 features and 64 i32 labels
    assert f"each step sends {64 * 64 * 4 + 64 * 4} bytes" in p.table()
    # the dataset uploaded once: a step sends 64 row ids
    placed = SPEC.replace("test = 0.1 }", "test = 0.1 }\nplacement = \"device\"")
    assert "each step sends 256 bytes" in sc.plan(placed, device=dev).table()


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_elementwise_and_matmul_match_numpy(dev, page):
    r = np.random.default_rng(0)
    x = r.standard_normal((33, 65)).astype(np.float32)
    w = r.standard_normal((65, 17)).astype(np.float32)
    before = page.requests
    got = (sc.tensor(x, device=dev) * 2.0 + 1.0).numpy()
    np.testing.assert_allclose(got, x * 2 + 1, rtol=1e-6)
    got = (sc.tensor(x, device=dev) @ sc.tensor(w, device=dev)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    assert page.requests - before <= 10     # a pipeline each (compile errors come back at once) and the reads


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_a_kernel_the_page_cannot_compile_is_a_kernel_error(dev):
    be = dev.impl
    be.pipeline("broken:1", "@compute @workgroup_size(1) fn main() { let x: f32 = nope; }")
    with pytest.raises(KernelError) as e:       # compiled on the page with the batch: reported at its flush
        be.device.flush()
    text = str(e.value)
    assert "kernel 'broken' failed to compile on browser" in text and "nope" in text and "kernel line 1" in text


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_digits_mlp_trains_as_on_the_reference(dev, page, tmp_path):
    from scellis_jupyter.run.run import Run
    losses, acc = {}, {}
    for d in (dev, sc.device("reference")):
        before = page.requests
        run = Run(SPEC, device=d, store=str(tmp_path / d.backend), steps=30, eval_every=30)
        losses[d.backend] = np.array([float(s.loss) for s in run])
        acc[d.backend] = run.result()["metrics"].get("test_accuracy")
        msgs = page.requests - before
        if d is dev:
            per_step = msgs / 30
    assert len(losses["wgpu"]) == 30
    np.testing.assert_allclose(losses["wgpu"], losses["reference"], rtol=1e-4, atol=1e-4)
    assert acc["wgpu"] == pytest.approx(acc["reference"], abs=0.02)
    assert per_step < 4, per_step              # batched: a few messages a step, not one per dispatch
    assert losses["wgpu"][-5:].mean() < losses["wgpu"][:5].mean()


_DAWN_RUN = """
import json, sys
import scellis_jupyter as sc
from scellis_jupyter.quickstart import SPEC
from scellis_jupyter.run.run import Run
run = Run(SPEC, device=sc.device("wgpu"), store=None, steps=int(sys.argv[1]), eval_every=10**6, tier="debug")
losses = [float(s.loss).hex() for s in run]
print("DAWN " + json.dumps({"via": run.device.via, "name": run.device.name, "losses": losses,
                            "weights": run.weights_hash()}))
"""


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
@pytest.mark.skipif(not dawn.available(), reason="no SwiftShader ICD: Dawn has no adapter here")
def test_tier_debug_is_bit_identical_to_dawn_native_on_the_same_adapter(dev, tmp_path):
    """Issue 37's determinism: the page's run under tier debug gives the very bits the same run gives on Dawn in
    this process's stead (Dawn natively, over the SwiftShader Chromium ships: the page's adapter)."""
    from scellis_jupyter.run.run import Run
    steps = 12
    r = subprocess.run([sys.executable, "-c", _DAWN_RUN, str(steps)], env=dawn.env(), capture_output=True, text=True,
                       timeout=600, cwd=dawn.ROOT)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("DAWN ")), None)
    assert line, r.stdout[-2000:] + r.stderr[-3000:]
    native = json.loads(line[5:])
    assert native["via"].startswith("dawn") and "swiftshader" in native["name"].lower(), native
    run = Run(SPEC, device=dev, store=None, steps=steps, eval_every=10**6, tier="debug")
    losses = [float(s.loss).hex() for s in run]
    assert losses == native["losses"]
    assert run.weights_hash() == native["weights"]


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_a_checkpoint_made_on_the_page_resumes_on_the_reference_and_back(dev, tmp_path):
    from scellis_jupyter.run.run import Run
    store = str(tmp_path / "store")
    run = Run(SPEC, device=dev, store=store, steps=20, eval_every=20)
    for _ in run:
        pass
    rid = run.result()["run"]
    from scellis_jupyter.run.lifecycle import prepare_resume
    more = prepare_resume(rid, store=store, steps=30, device="reference")
    got = [float(s.loss) for s in more]              # steps 21..30, from the weights, moments and RNG read back
    back = prepare_resume(more.result()["run"], store=store, steps=40, device="browser")   # and back to the page
    assert back.device is dev
    got += [float(s.loss) for s in back]
    straight = Run(SPEC, device=sc.device("reference"), store=str(tmp_path / "ref"), steps=40, eval_every=20)
    want = [float(s.loss) for s in straight]
    assert more.result()["steps"] == 30 and back.result()["steps"] == 40 and len(got) == 20
    np.testing.assert_allclose(got, want[20:], rtol=1e-3, atol=1e-3)
    assert back.result()["metrics"]["test_accuracy"] == pytest.approx(straight.result()["metrics"]["test_accuracy"],
                                                                      abs=0.02)


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_a_run_trained_on_the_page_verifies_on_the_reference_and_shows(dev, tmp_path, capsys):
    """`verify` re-executes the page's run from its pinned inputs on the reference path (another device: within
    the tier's cross-device tolerance) and `show` names the page's device and implementation."""
    from scellis_jupyter import cli
    from scellis_jupyter.run.run import Run
    from scellis_jupyter.run.verify import verify
    store = str(tmp_path / "store")
    run = Run(SPEC, device=dev, store=store, steps=20, eval_every=10)
    for _ in run:
        pass
    rid = run.result()["run"]
    v = verify(rid, store=store, device="reference")
    assert v.ok, [c for c in v.checks if not c.ok]
    assert v.mode == "tolerance" and {c.name for c in v.checks} >= {"spec", "weights"}, v.checks
    assert cli.main(["show", rid, "--store", store]) == 0
    out = capsys.readouterr().out
    assert "browser" in out and "swiftshader" in out.lower(), out


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_no_webgpu_on_the_page_is_refused_before_compute(page, tmp_path, monkeypatch):
    args = [a for a in browser_page.WEBGPU_ARGS if "webgpu" not in a and "Vulkan" not in a] + ["--disable-gpu"]
    with browser_page.page_transport(tmp_path, args=args, pw=page.pw) as t:
        monkeypatch.setattr(browser, "_TRANSPORT", {"t": t})
        with pytest.raises(DeviceError) as e:
            sc.device("browser")
        assert t.requests == 1                       # the hello, nothing else
    assert "has no WebGPU" in str(e.value) and "available here:" in str(e.value)
