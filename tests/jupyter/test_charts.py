"""Issue 35 item 6, the static charts (widgets/_static.py, the Python side of js/src/lib/chart.js): series of
one run told apart, ranges for a single evaluation point, log y in whole decades with room, ticks that never
repeat a label."""
import re

import numpy as np
import pytest

from scellis_jupyter.jupyter.widgets import LossCurve
from scellis_jupyter.jupyter.widgets._static import (fmt_ticks, line_chart, log_height, log_range, nice_ticks,
                                                     series_styles, split_of, y_range)


def _labels(svg: str) -> list[str]:
    return re.findall(r'font-size="10" fill="[^"]*">([^<]*)<', svg)


def test_one_hue_per_metric_a_dash_per_split_and_runs_by_a_second_cue():
    assert split_of("val_loss") == ("loss", "val") and split_of("loss") == ("loss", "train")
    assert split_of("test_f1") == ("f1", "test")
    st = series_styles([("r", "loss"), ("r", "val_loss"), ("r", "test_loss")])
    assert len({s["color"] for s in st}) == 1 and len({str(s["dash"]) for s in st}) == 3
    m = series_styles([("r", "val_accuracy"), ("r", "val_f1")])
    assert m[0]["color"] != m[1]["color"]
    two = series_styles([("a", "loss"), ("b", "loss")])
    assert two[0]["color"] != two[1]["color"] and two[0]["width"] != two[1]["width"]
    assert [s["label"] for s in two] == ["a: loss", "b: loss"]


def test_the_static_curve_draws_each_split_with_its_own_dash_and_each_metric_with_its_own_hue():
    c = LossCurve()
    steps = np.arange(1, 301)
    c.add("r", "loss", steps, np.linspace(1, 0.1, 300))
    c.add("r", "val_loss", np.array([100, 300]), np.array([0.5, 0.2]))
    c.add("r", "test_loss", np.array([300]), np.array([0.25]))
    c.add("r", "val_accuracy", np.array([150, 300]), np.array([0.8, 0.9]))
    c.add("r", "val_f1", np.array([150, 300]), np.array([0.7, 0.85]))
    html = c._static_html()
    lines = re.findall(r'<polyline fill="none" stroke="([^"]+)" stroke-width="[^"]+"( stroke-dasharray="[^"]+")?', html)
    loss_styles = {(col, dash) for col, dash in lines[:2]}
    assert len(loss_styles) == 2 and len({col for col, _ in lines[:2]}) == 1, lines
    assert lines[2][0] != lines[3][0], lines                       # val_accuracy and val_f1: two hues


def test_a_single_evaluation_point_keeps_the_runs_x_axis_and_a_narrow_y_band():
    assert y_range(0.9, 0.9)[0] > 0.8 and y_range(0.9, 0.9)[1] < 1
    c = LossCurve()
    c.add("r", "loss", np.arange(1, 301), np.linspace(1, 0.1, 300))
    c.add("r", "val_accuracy", np.array([300]), np.array([0.9]))
    metrics = c._static_html().split(">Metrics<")[1]
    ticks = [float(v) for v in _labels(metrics) if re.fullmatch(r"[\d.]+", v)]
    ys = [v for v in ticks if v < 1.5]
    xs = [v for v in ticks if v >= 1.5]
    assert ys and min(ys) > 0.8 and max(ys) < 1.0, ticks          # not 0..2
    assert max(xs) <= 300, ticks                                    # not to 600


def test_log_y_spans_whole_decades_and_gives_each_room():
    assert log_range(0.3, 2.3) == (-1, 1) and log_range(1e-8, 1) == (-8, 0)
    assert log_height(1e-8, 1) >= 100 + 8 * 32
    svg = line_chart([{"label": "loss", "x": np.arange(1, 301), "y": np.logspace(0, -8, 300), "color": "#000"}],
                     log_y=True)
    height = float(re.search(r'viewBox="0 0 \d+ (\d+)"', svg).group(1))
    assert height >= 8 * 25 + 60, height
    assert {"1", "1e-8"} <= set(_labels(svg)), _labels(svg)


def test_ticks_never_repeat_a_label():
    assert nice_ticks(299, 301) == [299, 299.5, 300, 300.5, 301]
    assert fmt_ticks([299, 299.5, 300, 300.5, 301]) == ["299", "299.5", "300", "300.5", "301"]
    assert fmt_ticks([1e-4, 1.5e-4]) == ["1.0e-4", "1.5e-4"]
    svg = line_chart([{"label": "loss", "x": np.array([299, 300, 301]), "y": np.array([1.0, 0.9, 0.8]),
                       "color": "#000"}])
    xl = [v for v in _labels(svg) if re.fullmatch(r"\d{3}(\.\d+)?", v)]
    assert len(xl) >= 3 and len(set(xl)) == len(xl), xl


def test_the_static_plan_bar_spans_the_box_and_marks_capacity_where_the_live_view_does():
    """The live bar (js/src/plan_view.js) spans its box with the marker at capacity / max(peak, capacity);
    the static forms say the same (the old one drew a 600 px bar in a wider box: its right end, the capacity
    of a green plan, sat near the middle of the box)."""
    import scellis_jupyter as sc
    from scellis_jupyter.jupyter.display import plan_html
    from scellis_jupyter.jupyter.widgets import PlanView
    green = sc.plan("benchmarks/specs/mlp.toml", device="reference")
    red = sc.plan("benchmarks/specs/mlp.toml", device="reference", memory=green.peak_bytes // 2)
    for p, frac in ((green, 1.0), (red, red.capacity_bytes / red.peak_bytes)):
        svg = re.search(r'<svg[^>]*aria-label="memory breakdown".*?</svg>', PlanView(p)._static_html()).group(0)
        assert "max-width" not in svg.split(">")[0] and 'width="100%"' in svg
        assert float(re.search(r'class="scellis-capacity" data-capacity="([\d.]+)"', svg).group(1)) == \
            pytest.approx(frac, abs=1e-3)
        assert float(re.search(r'class="scellis-capacity" data-capacity="([\d.]+)"', plan_html(p)).group(1)) == \
            pytest.approx(frac, abs=1e-3)


def test_the_static_round_curve_has_y_ticks_and_a_narrow_band_for_one_value():
    from scellis_jupyter.jupyter.widgets.round_monitor import rounds_svg
    svg = rounds_svg([{"round": 1, "metric": 0.5}, {"round": 2, "metric": 0.75}], "acc")
    assert re.findall(r'class="scellis-ytick"[^>]*>([^<]*)<', svg) == ["0.5", "0.6", "0.7"]
    one = [float(v) for v in re.findall(r'class="scellis-ytick"[^>]*>([^<]*)<', rounds_svg([{"round": 1, "metric": 0.9}], "acc"))]
    assert len(one) >= 2 and all(0.8 < v < 1.0 for v in one), one
    assert "no acc yet" in rounds_svg([], "acc")
