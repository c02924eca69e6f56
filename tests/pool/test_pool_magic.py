"""`%scellis pool` (parsed apart from executed) shows the pool's workers, devices, memory, trust regime and
dashboard link; a two-key sweep fills a HeatmapView cell by cell as its shards land."""
from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import scellis_jupyter as sc
from scellis_jupyter.jupyter.parse import parse_line
from scellis_jupyter.pool import Pool
from scellis_jupyter.pool.workloads import train_cell

POOL_MIME = "application/vnd.scellis.pool+json"
SPEC = """
name = "digits-tiny"
[data]
dataset = "digits"
split = { train = 0.8, val = 0.1, test = 0.1 }
[model]
nodes = [{ op = "linear", out = 16 }, { op = "relu" }, { name = "logits", op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 64
metrics = ["accuracy"]
determinism = "debug"
"""


@pytest.fixture
def ip(tmp_path, monkeypatch):
    monkeypatch.setenv("SCELLIS_DEVICE", "reference")
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.reset(new_session=False)
    shell.run_line_magic("load_ext", "scellis_jupyter")
    yield shell
    p = shell.user_ns.get("pool")
    if isinstance(p, Pool):
        p.close()
    shell.run_line_magic("unload_ext", "scellis_jupyter")


def run(shell, code):
    with capture_output() as c:
        r = shell.run_cell(code)
    return r.error_in_exec or r.error_before_exec, [o.data for o in c.outputs]


def test_parsing_the_pool_line():
    c = parse_line("pool --workers 2 --threads --name p2")
    assert (c.workers, c.threads, c.name, c.address, c.close) == (2, True, "p2", None, False)
    assert parse_line("pool").name == "pool"
    assert "--workers N" in parse_line("pool --help").help and "dashboard" in parse_line("help").help
    with pytest.raises(sc.MagicError, match="not allowed with"):
        parse_line("pool --workers 2 --address tcp://x:1")
    with pytest.raises(sc.MagicError, match="at least 1"):
        parse_line("pool --workers 0")
    with pytest.raises(sc.MagicError, match="invalid choice"):
        parse_line("pool --trust everyone")
    for bad in ("nan", "inf", "-1", "0"):                      # Dask's KeyError on 'nan', or 'within -1 s'
        with pytest.raises(sc.MagicError, match="positive, finite number of seconds"):
            parse_line(f"pool --address tcp://127.0.0.1:9 --timeout {bad}")
    assert parse_line("pool --address tcp://127.0.0.1:9 --timeout 2.5").timeout == 2.5


def test_the_pool_magic_shows_workers_devices_and_the_dashboard(ip):
    err, _ = run(ip, "%scellis pool")
    assert isinstance(err, UsageError) and "--workers 2" in str(err)
    err, outs = run(ip, "%scellis pool --workers 2 --threads")
    assert err is None, err
    d = outs[-1][POOL_MIME]
    assert isinstance(ip.user_ns["pool"], Pool) and len(d["workers"]) == 2 and d["trust"] == "own"
    assert {w["backend"] for w in d["workers"]} == {"reference"}
    assert all(w["memory_limit"] > 0 and w["threads"] == 1 for w in d["workers"])
    assert d["dashboard"].startswith("http://127.0.0.1:") and d["dashboard"].endswith("/status")
    text = outs[-1]["text/plain"]
    assert "2 workers" in text and "trust regime own" in text and "dashboard" in text
    assert "Dask dashboard" in outs[-1]["text/html"]
    err, outs = run(ip, "%scellis pool --json")
    assert err is None and len(outs[-1]["application/json"]["workers"]) == 2
    err, outs = run(ip, "%scellis pool --close")
    assert err is None and "pool" not in ip.user_ns


def test_a_sweep_fills_the_heatmap_cell_by_cell():
    from scellis_jupyter.jupyter.pool_view import heatmap_sweep
    from scellis_jupyter.jupyter.widgets import HeatmapView
    grid = {"optimizer.lr": [1e-3, 3e-2], "batch_size": [32, 64]}
    view = HeatmapView("optimizer.lr", grid["optimizer.lr"], "batch_size", grid["batch_size"], "val_accuracy")
    filled = []
    with Pool(workers=2, processes=False) as p:
        got, res = heatmap_sweep(p, SPEC, grid, metric="val_accuracy", steps=3, view=view,
                                 on_cell=lambda i, c: filled.append(sum(v is not None for r in view.values for v in r)))
    assert got is view
    assert filled == [1, 2, 3, 4]                       # one more cell each time a shard landed
    assert view.x_values == [1e-3, 3e-2] and view.y_values == [32, 64]
    local = train_cell({"optimizer.lr": 3e-2, "batch_size": 64}, spec=SPEC, steps=3)
    assert view.values[1][1] == pytest.approx(local["metrics"]["val_accuracy"], rel=1e-12)
    assert "val_accuracy by batch_size" in view._static_text() and "…" not in view._static_text()
    with pytest.raises(sc.PoolError, match="two keys"):
        heatmap_sweep(None, SPEC, {"optimizer.lr": [1e-3]})


def test_parsing_the_sweep_line():
    c = parse_line("sweep tiny --grid optimizer.lr=1e-3,3e-2 --grid batch_size=32,64 --steps 2")
    assert c.grid == [("optimizer.lr", [1e-3, 3e-2]), ("batch_size", [32, 64])] and c.steps == 2
    assert c.pool == "pool" and c.verify == "none" and c.metric is None
    assert parse_line("sweep m --grid optimizer=adam,sgd --grid seed=1,2").grid[0] == ("optimizer", ["adam", "sgd"])
    with pytest.raises(sc.MagicError, match="KEY=V1,V2"):
        parse_line("sweep tiny --grid lr")
    with pytest.raises(sc.MagicError, match="required: --grid"):
        parse_line("sweep tiny")


def test_the_sweep_magic_fills_a_heatmap_on_the_notebook_pool(ip):
    err, _ = run(ip, "%%scellis tiny --quiet\n" + SPEC)
    assert err is None, err
    err, _ = run(ip, "%scellis sweep tiny --grid optimizer.lr=1e-3,3e-2 --grid batch_size=32,64 --steps 2")
    assert isinstance(err, UsageError) and "no pool named 'pool'" in str(err)
    assert run(ip, "%scellis pool --workers 2 --threads")[0] is None
    err, _ = run(ip, "%scellis sweep tiny --grid optimizer.lr=1e-3,3e-2 --steps 2")
    assert isinstance(err, UsageError) and "two different --grid axes" in str(err)
    err, outs = run(ip, "%scellis sweep tiny --grid optimizer.lr=1e-3,3e-2 --grid batch_size=32,64 --steps 2")
    assert err is None, err
    assert "4 cells of tiny on the pool (val_accuracy)" in outs[-1]["text/plain"]
    res = ip.user_ns["tiny"].sweep_result
    local = train_cell({"optimizer.lr": 1e-3, "batch_size": 64}, spec=SPEC, steps=2)
    assert res.value[1]["weights_hash"] == local["weights_hash"]
    i = next(k for k, o in enumerate(outs) if "application/vnd.jupyter.widget-view+json" in o)   # the live view
    static = outs[i + 1]                             # its static form, the next output
    assert "val_accuracy by batch_size x optimizer.lr" in static["text/plain"]
    assert "<table" in static["text/html"]
