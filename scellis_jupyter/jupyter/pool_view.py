"""A pool in the notebook: its description (`%scellis pool`) and a sweep drawn into a HeatmapView live.

Why cells as shards land: `Pool.run` calls back as each verified shard arrives (Dask's as_completed), so
the heatmap's cell (i, j) is set from the kernel while the sweep still runs; a notebook saved afterwards
keeps the filled grid as the widget's static form.
"""
from __future__ import annotations

import html
from typing import Callable

from ..errors import PoolError
from ..pool.info import describe, describe_text
from ..pool.workloads import grid_cells, sweep
from .display import Static


def pool_output(pool) -> Static:
    """The pool's description: text, an HTML table with the dashboard link, and the JSON."""
    d = describe(pool)
    text = describe_text(d)
    rows = "".join(f"<tr><td>{html.escape(w['address'])}</td><td>{w['threads']}</td>"
                   f"<td>{(w['memory_limit'] or 0) / 2**20:.0f} MiB</td><td>{html.escape(str(w['device']))}</td>"
                   f"<td>{'quarantined' if w['quarantined'] else 'ok'}</td></tr>" for w in d["workers"])
    link = (f"<a href='{html.escape(d['dashboard'])}' target='_blank'>Dask dashboard</a>" if d["dashboard"]
            else "no dashboard")
    page = (f"<div class='scellis-pool'><b>pool</b> ({d['kind']}) &middot; {len(d['workers'])} workers &middot; "
            f"trust regime <b>{html.escape(d['trust'])}</b> &middot; {link}"
            f"<table><tr><th>worker</th><th>threads</th><th>memory</th><th>device</th><th>state</th></tr>{rows}"
            f"</table></div>")
    return Static(text, page, {"application/vnd.scellis.pool+json": d})


def heatmap_sweep(pool, spec, grid: dict, *, metric: str = "val_accuracy", steps: int = 20,
                  view=None, on_cell: Callable[[int, dict], None] | None = None, **kw):
    """Sweep a two-key `grid` on `pool`, filling a HeatmapView (x: the first key, y: the second) cell by cell
    as shards land. Returns (view, JobResult)."""
    from .widgets import HeatmapView
    if len(grid) != 2:
        raise PoolError(f"a heatmap sweep takes a grid of two keys, got {len(grid)}", where="heatmap_sweep",
                        hint='grid={"optimizer.lr": [...], "batch_size": [...]}')
    (xk, xs), (yk, ys) = ((k, list(v)) for k, v in grid.items())
    view = view or HeatmapView(xk, xs, yk, ys, metric)
    cells = grid_cells(grid)

    def landed(i: int, cell: dict) -> None:
        c = cells[i]
        value = cell["metrics"].get(metric, cell.get(metric))
        if value is None:
            raise PoolError(f"the cells report no metric {metric!r}", where="heatmap_sweep",
                            hint=f"metrics: {', '.join(sorted(cell['metrics']))}")
        view.set_cell(ys.index(c[yk]), xs.index(c[xk]), value)
        if on_cell is not None:
            on_cell(i, cell)

    return view, sweep(pool, spec, grid=grid, steps=steps, on_cell=landed, **kw)
