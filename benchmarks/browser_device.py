"""The `browser` device's overhead (issue 37 item 6): steps/s of the digits MLP (the quickstart spec) trained on the
WebGPU of a headless Chromium page (SwiftShader) through the browser device, against the same spec on Dawn natively
over the same SwiftShader adapter, and what crosses the wire per step (messages, bytes each way, commands).

    python benchmarks/browser_device.py [--steps 200] [--warmup 30] [--spec benchmarks/specs/transformer.toml]

The page is reached through Playwright (tests/fixtures/browser_page.py), not a notebook comm: this measures the
proxy, the executor and the page's GPU, not JupyterLab's websocket (the lab test shows ~5 steps/s there, with the
curve and panel widgets updating beside it)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
SWIFTSHADER = "/usr/lib/chromium/vk_swiftshader_icd.json"

DAWN = r"""
import json, sys, time, tempfile
import scellis_jupyter as sc
from scellis_jupyter.quickstart import SPEC
from scellis_jupyter.run.run import Run
steps, warm = int(sys.argv[1]), int(sys.argv[2])
SPEC = open(sys.argv[3]).read() if len(sys.argv) > 3 and sys.argv[3] else SPEC
dev = sc.device("wgpu")
with tempfile.TemporaryDirectory() as d:
    run = Run(SPEC, device=dev, store=d, steps=steps + warm, eval_every=10**6, checkpoint_every=10**6)
    it = iter(run)
    losses = [float(next(it).loss) for _ in range(warm)]
    t0 = time.perf_counter()
    for _ in range(steps): next(it)
    print(json.dumps({"device": str(dev), "steps_per_s": steps / (time.perf_counter() - t0), "losses": losses}))
    for _ in it: pass
"""


def page(steps: int, warm: int, spec_path: str = "") -> dict:
    from fixtures.browser_page import page_transport
    from scellis_jupyter.backends.wgpu import browser
    import scellis_jupyter as sc
    from scellis_jupyter.quickstart import SPEC
    from scellis_jupyter.run.run import Run
    SPEC = Path(spec_path).read_text() if spec_path else SPEC
    with tempfile.TemporaryDirectory() as d, page_transport(Path(d)) as t:
        browser.set_transport(t)
        dev = sc.device("browser")
        run = Run(SPEC, device=dev, store=d + "/store", steps=steps + warm, eval_every=10**6, checkpoint_every=10**6)
        it = iter(run)
        losses = [float(next(it).loss) for _ in range(warm)]
        back = [0]
        orig = t.request

        def counted(m, b):
            reply, bufs = orig(m, b)
            back[0] += sum(len(x) for x in bufs)
            return reply, bufs
        t.request = counted
        s0 = orig({"op": "stats"}, [])[0]
        r0, b0 = t.requests, t.bytes
        t0 = time.perf_counter()
        for _ in range(steps):
            next(it)
        el = time.perf_counter() - t0
        s1 = orig({"op": "stats"}, [])[0]
        out = {"device": str(dev), "steps_per_s": steps / el, "messages_per_step": (t.requests - r0 - 1) / steps,
               "bytes_to_page_per_step": (t.bytes - b0) / steps, "bytes_back_per_step": back[0] / steps,
               "commands_per_step": (s1["commands"] - s0["commands"]) / steps,
               "dispatches_per_step": (s1["dispatches"] - s0["dispatches"]) / steps, "losses": losses}
        t.request = orig
        for _ in it:
            pass
        return out


def dawn(steps: int, warm: int, spec_path: str = "") -> dict | None:
    if not Path(SWIFTSHADER).exists():
        return None
    env = dict(os.environ, SCELLIS_WEBGPU="dawn", VK_ICD_FILENAMES=SWIFTSHADER, VK_DRIVER_FILES=SWIFTSHADER,
               PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", DAWN, str(steps), str(warm), spec_path], env=env, capture_output=True, text=True,
                       timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": r.stderr[-500:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--spec", default="", help="a spec file (default: the quickstart's digits MLP)")
    a = ap.parse_args()
    p = page(a.steps, a.warmup, a.spec)
    n = dawn(a.steps, a.warmup, a.spec)
    same = n is not None and n.get("losses") == p["losses"]
    lp, ln = p.pop("losses"), (n or {}).pop("losses", None)
    print(json.dumps({"browser_page": p, "dawn_native": n}, indent=1))
    if ln is not None:
        import numpy as np
        d = float(np.max(np.abs(np.array(lp) - np.array(ln))))
        print(f"tier debug, the warm-up's {len(lp)} losses: {'bit-identical' if same else f'differ by up to {d:.3g}'} "
              "on the page and on Dawn native over SwiftShader")
    if n and "steps_per_s" in n:
        print(f"{a.spec or 'digits MLP, batch 64'}: browser page {p['steps_per_s']:.1f} steps/s, Dawn native {n['steps_per_s']:.1f} "
              f"steps/s on the same SwiftShader ({p['steps_per_s'] / n['steps_per_s']:.2f}x); per step "
              f"{p['messages_per_step']:.2f} messages, {p['bytes_to_page_per_step'] / 1024:.1f} KiB to the page, "
              f"{p['bytes_back_per_step']:.0f} B back, {p['commands_per_step']:.0f} commands, "
              f"{p['dispatches_per_step']:.0f} dispatches")


if __name__ == "__main__":
    main()
