"""The `browser` device's overhead (issue 37 item 6): steps/s of the digits MLP (the quickstart spec) trained on the
WebGPU of a headless Chromium page (SwiftShader) through the browser device, against the same spec on Dawn natively
over the same SwiftShader adapter, and what crosses the wire per step (messages, bytes each way, commands).

    python benchmarks/browser_device.py [--steps 200] [--warmup 30] [--spec benchmarks/specs/transformer.toml]
    python benchmarks/browser_device.py --lab [--steps 200] [--warmup 30]

The page is reached through Playwright (tests/fixtures/browser_page.py), not a notebook comm: this measures the
proxy, the executor and the page's GPU. `--lab` measures the same spec in a JupyterLab tab over the GpuDevice
widget's comm (tests/fixtures/lab.py starts the server, with whatever server extensions the environment enables:
`jupyter server extension disable scellis_jupyter.jupyter.server_extension` gives the as-shipped server's figures):
the round trip of an empty message from a cell, steps/s of a Run stepped in the cell, and steps/s of `%scellis train`
in the background with its panel and curve."""
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "browser"), str(ROOT / "tests")]   # conftest: the browser tests'
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


LAB_CELLS = [
    "%load_ext scellis_jupyter\nimport json, time\nimport scellis_jupyter as sc",
    "%scellis device browser",
    """from scellis_jupyter.quickstart import SPEC
from scellis_jupyter.run.run import Run
d = sc.device("browser").impl.device
d.flush()
t0 = time.perf_counter()
for _ in range(50):
    d.flush()
rtt = (time.perf_counter() - t0) / 50
run = Run(SPEC, device=sc.device("browser"), store=None, steps={warm} + {steps}, eval_every=10**6)
it = iter(run)
for _ in range({warm}):
    next(it)
t0 = time.perf_counter()
for _ in range({steps}):
    next(it)
fg = {steps} / (time.perf_counter() - t0)
for _ in it:
    pass
print("LAB " + json.dumps({{"rtt_ms": rtt * 1e3, "cell_steps_per_s": fg}}))""",
    "%%scellis digits\n{spec}",
    "%scellis train digits --steps {total} --checkpoint-every 1000000",
    "%scellis wait digits",
    """ev = [e for e in digits.run.events if e["kind"] == "step"]
a, b = ev[{warm}], ev[-1]
print("LAB " + json.dumps({{"background_steps_per_s": (b["step"] - a["step"]) / (b["time"] - a["time"]),
                           "events": len(ev)}}))""",
]


def lab(steps: int, warm: int) -> dict:
    """The digits spec in a JupyterLab tab (headless Chromium, WebGPU over SwiftShader) over the widget comm."""
    import re
    import nbformat
    from playwright.sync_api import sync_playwright
    from fixtures.lab import lab_server
    from fixtures.browser_page import CHROMIUM, WEBGPU_ARGS
    from conftest import run_cell
    from test_lab import _open, _wait
    from scellis_jupyter.quickstart import SPEC
    cells = [c.format(steps=steps, warm=warm, total=steps + warm, spec=SPEC.strip()) for c in LAB_CELLS]
    out: dict = {}
    with tempfile.TemporaryDirectory() as d, lab_server(Path(d)) as (url, nb_dir), sync_playwright() as pw:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nbformat.write(nb, nb_dir / "lab_bench.ipynb")
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=WEBGPU_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1280, "height": 2000}).new_page()
        _open(page, url, "lab_bench.ipynb")
        loc = page.locator(".jp-Notebook .jp-Cell")
        _wait(lambda: loc.count() >= len(cells), 60, what="the cells")
        for i in range(len(cells)):
            run_cell(page, i, timeout=600)
            text = loc.nth(i).locator(".jp-OutputArea").inner_text()
            for m in re.finditer(r"LAB (\{.*\})", text):
                out.update(json.loads(m.group(1)))
            if "Error" in text and "LAB" not in text and i != 3:
                out.setdefault("errors", []).append(text[-800:])
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--spec", default="", help="a spec file (default: the quickstart's digits MLP)")
    ap.add_argument("--lab", action="store_true", help="in a JupyterLab tab over the widget comm")
    a = ap.parse_args()
    if a.lab:
        r = lab(a.steps, a.warmup)
        print(json.dumps(r, indent=1))
        if "rtt_ms" in r:
            print(f"JupyterLab tab, digits MLP: an empty message's round trip {r['rtt_ms']:.1f} ms; "
                  f"{r['cell_steps_per_s']:.1f} steps/s stepped in a cell, "
                  f"{r.get('background_steps_per_s', float('nan')):.1f} steps/s with %scellis train (panel and curve)")
        return
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
