"""The charts in a real JupyterLab (Debian's Chromium), issue 35 item 6: series of one run are told apart
(one hue per metric, a dash per split), a single evaluation point keeps the run's x axis and a narrow y band,
log y gives each decade room, a live theme switch keeps the chart's width, and the RoundMonitor's curve has
y ticks."""
import time

import pytest

import lab_notebook as notebook
from test_lab import _lab_page, _open, _theme, _wait

pytestmark = pytest.mark.slow

CURVE = '''
import numpy as np
from scellis_jupyter.jupyter.widgets import LossCurve
c = LossCurve(title="charts")
steps = np.arange(1, 301)
c.add("r", "loss", steps, np.logspace(0, -8, 300))          # eight decades
c.add("r", "val_loss", np.array([100, 200, 300]), np.array([0.5, 0.2, 0.1]))
c.add("r", "test_loss", np.array([300]), np.array([0.12]))
c.add("r", "val_accuracy", np.array([300]), np.array([0.9]))
c.add("r", "val_f1", np.array([300]), np.array([0.8]))
c
'''
ROUNDS = '''
import numpy as np
from scellis_jupyter.federated import Federation
from scellis_jupyter.jupyter.widgets import RoundMonitorView
from scellis_jupyter.pool import Pool
SPEC = """
name = "fed-charts"
[model]
nodes = [{ name = "out", op = "linear", out = 2 }]
[recipe]
loss = "mse"
optimizer = { name = "sgd", lr = 0.05 }
batch_size = 4
determinism = "debug"
seed = 0
"""
rng = np.random.default_rng(0)
sites = {s: (rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32))
         for s in ("north", "south")}
fed = Federation(Pool(), SPEC, sites, local_steps=2)
view = RoundMonitorView(fed, metric="mse", rounds=3)
xt, yt = sites["north"]
fed.fit(3, evaluate=lambda w: {"mse": float(np.mean((fed.predict(xt, w) - yt) ** 2))})
view
'''


def _legend(page, group):
    """(label, border colour, border style) of each series in a panel's legend."""
    return page.locator(f".sc-curve [data-group={group}] .u-series").evaluate_all(
        """rows => rows.slice(1).map(r => { const m = r.querySelector('.u-marker'); const s = getComputedStyle(m);
             return [r.querySelector('.u-label').textContent, s.borderTopColor, s.borderTopStyle]; })""")


def _range(page, group, axis):
    v = page.locator(f".sc-curve [data-group={group}]").first.get_attribute(f"data-{axis}")
    return [float(x) for x in v.split(",")] if v else None


def test_charts_in_lab(lab, chromium_browser, artifacts, run_cell):
    """Each check adds to `problems` and the test fails at the end with all of them (what a regression breaks
    is then seen at once; on the code before issue 35 every check below fails)."""
    url, nb_dir = lab
    notebook.write_cells(nb_dir / "charts.ipynb", CURVE, ROUNDS)
    problems = []
    with _lab_page(chromium_browser, artifacts, "charts-failure.png", 1600) as (page, errors):
        _open(page, url, "charts.ipynb")
        run_cell(page, 0, timeout=120)
        page.wait_for_selector(".sc-curve [data-group=metrics] .u-series", timeout=60_000)
        time.sleep(1.0)
        # loss, val_loss and test_loss: one hue, three dashes (the legend's markers say it too)
        loss = _legend(page, "loss")
        assert [r[0] for r in loss] == ["loss", "val_loss", "test_loss"], loss
        if len({(r[1], r[2]) for r in loss}) != 3 or len({r[1] for r in loss}) != 1:
            problems.append(f"loss, val_loss, test_loss not one hue and three dashes: {loss}")
        metrics = _legend(page, "metrics")
        if metrics[0][1] == metrics[1][1]:
            problems.append(f"val_accuracy and val_f1 share a colour: {metrics}")
        # one evaluation point at step 300: the metrics panel spans the run (1..300), y a narrow band
        x, y = _range(page, "metrics", "x"), _range(page, "metrics", "y")
        if not x or x[0] < 0 or x[1] > 310:
            problems.append(f"the metrics panel's x range is {x}, not the run's steps")
        if not y or not (0.5 < y[0] < 0.8 and 0.9 < y[1] < 1.0):
            problems.append(f"one accuracy value's y range is {y}")
        box = page.locator(".sc-curve").first
        box.screenshot(path=str(artifacts / "charts-linear.png"))
        # log y: eight decades get room (at least ~25 px of plot per decade)
        plot_h = lambda: page.locator(".sc-curve [data-group=loss] .u-over").first.evaluate(  # noqa: E731
            "e => e.getBoundingClientRect().height")
        page.locator(".sc-curve button", has_text="log y").click()
        _wait(lambda: page.locator("[data-log-y=true]").count(), 20, what="log y")
        time.sleep(0.5)
        if plot_h() < 8 * 25:
            problems.append(f"log y: eight decades in {plot_h()} px")
        box.screenshot(path=str(artifacts / "charts-log.png"))
        # a live theme switch keeps the chart's width
        width = lambda: page.locator(".sc-curve [data-group=loss] .uplot").first.evaluate(  # noqa: E731
            "e => e.getBoundingClientRect().width")
        before = width()
        assert before > 700, before
        _theme(page, dark=True)
        time.sleep(0.5)
        after = width()
        box.screenshot(path=str(artifacts / "charts-dark.png"))
        _theme(page, dark=False)
        if abs(after - before) > 4:
            problems.append(f"the theme switch changed the chart's width from {before} to {after}")
        # the RoundMonitor's curve has y ticks
        run_cell(page, 1, timeout=180)
        page.wait_for_selector(".sc-rounds [data-site]", timeout=60_000)
        _wait(lambda: page.locator("[data-rounds='3']").count(), 60, what="three rounds")
        ticks = page.locator(".sc-rounds svg .sc-ytick").all_text_contents()
        if len(ticks) < 2 or len(set(ticks)) != len(ticks):
            problems.append(f"the RoundMonitor's y ticks: {ticks}")
        page.locator(".sc-rounds").first.screenshot(path=str(artifacts / "charts-rounds.png"))
        assert not [e for e in errors if "scellis" in e.lower() or "sc-" in e], errors
    assert not problems, "\n".join(problems)
