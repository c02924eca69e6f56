"""RoundMonitorView in a real JupyterLab (Debian's Chromium): it renders with no rounds, updates while
`fit` is still running (sites report within a round, rounds land one by one, the eps spent grows), follows
the dark theme, and stays within a narrow notebook."""
import re

import pytest

import lab_notebook as notebook
from test_lab import _dark_and_narrow, _lab_page, _open, _wait

pytestmark = pytest.mark.slow
ROUNDS = 5

SETUP = f'''
import time
import numpy as np
from scellis_jupyter.federated import Federation, Privacy
from scellis_jupyter.jupyter.widgets import RoundMonitorView
from scellis_jupyter.pool import Pool
SPEC = """
name = "fed-lab"
[model]
nodes = [{{ name = "out", op = "linear", out = 2 }}]
[recipe]
loss = "mse"
optimizer = {{ name = "sgd", lr = 0.05 }}
batch_size = 4
determinism = "debug"
seed = 0
"""
rng = np.random.default_rng(0)
sites = {{s: (rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
         for s in ("north", "south", "east")}}
pool = Pool()
fed = Federation(pool, SPEC, sites, privacy=Privacy(30.0, 1e-5, clip=1.0, noise_multiplier=1.5), local_steps=2)
fed.listeners.append(lambda r: time.sleep(1.0))       # slow enough to watch the rounds land
view = RoundMonitorView(fed, metric="mse", rounds={ROUNDS})
fed.progress.append(lambda e: time.sleep(0.3) if e["kind"] == "site_done" else None)   # after the view's update
view
'''
FIT = f'''xt, yt = sites["north"]
fed.fit({ROUNDS}, evaluate=lambda w: {{"mse": float(np.mean((fed.predict(xt, w) - yt) ** 2))}})
print("fit done", fed.ledger.spent)'''


def test_round_monitor_renders_and_updates_in_lab(lab, chromium_browser, artifacts, run_cell):
    url, nb_dir = lab
    notebook.write_cells(nb_dir / "rounds.ipynb", SETUP, FIT)
    with _lab_page(chromium_browser, artifacts, "rounds-failure.png", 1600) as (page, errors):
        _open(page, url, "rounds.ipynb")
        run_cell(page, 0, timeout=120)
        sel = "[data-rounds]"
        page.wait_for_selector(sel, timeout=60_000)
        rounds = lambda: int(page.locator(sel).first.get_attribute("data-rounds"))  # noqa: E731
        assert rounds() == 0 and "no mse yet" in page.locator(".sc-rounds").inner_text()
        assert page.locator(".sc-rounds [data-site]").count() == 3
        run_cell(page, 1, wait=False)
        # live: a round count strictly between 0 and ROUNDS is seen while the cell still runs
        # within a round: a site that has sent its update while another still trains
        _wait(lambda: page.locator(".sc-rounds [data-now=sent]").count() >= 1 and
              page.locator(".sc-rounds [data-now=training]").count() >= 1, 90, every=0.05, what="a round in flight")
        assert re.search(r"sent round \d+", page.locator(".sc-rounds").inner_text())
        mid = _wait(lambda: 0 < rounds() < ROUNDS and rounds(), 90, every=0.1, what="a round to land")
        eps_mid = float(page.locator(sel).first.get_attribute("data-eps"))
        prompt = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-InputArea-prompt")
        assert prompt.inner_text().strip() == "[*]:", "the rounds were seen only after the cell finished"
        _wait(lambda: rounds() == ROUNDS, 90, what="every round")
        _wait(lambda: re.match(r"\[\d+\]", prompt.inner_text().strip()), 60, what="the fit cell to finish")
        eps = float(page.locator(sel).first.get_attribute("data-eps"))
        assert eps > eps_mid > 0, (mid, eps_mid, eps)
        text = page.locator(".sc-rounds").inner_text()
        assert "of 30 spent" in text and f"{ROUNDS} answered" in text and "last " in text
        assert int(page.locator(sel).first.get_attribute("data-points")) == ROUNDS
        out = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-OutputArea").inner_text()
        assert f"{eps:.4f}"[:5] in out                      # the kernel's ledger says what the view shows
        box = page.locator(".sc-rounds").first
        box.screenshot(path=str(artifacts / "rounds-light.png"))
        _dark_and_narrow(page, box, artifacts, "rounds")
        box.screenshot(path=str(artifacts / "rounds-narrow.png"))
        assert not [e for e in errors if "scellis" in e.lower() or "sc-" in e], errors
