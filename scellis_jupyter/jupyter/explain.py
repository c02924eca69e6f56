"""The stage explorer's kernel-free form: one training step's spec, Graph, Program, Plan and WGSL as text and
as self-contained HTML/SVG (no script), for a notebook viewed without a kernel.

The live view is the StageExplorer widget (widgets/stage_explorer.py, js/src/stage_explorer.js); both draw the
dict that plan.explain.explain returns.
"""
from __future__ import annotations

from html import escape

PHASES = ("forward", "backward", "update")
L = ' style="text-align:left"'     # Lab's and nbconvert's rendered-HTML CSS right-align table cells
ROLE_COLORS = {"activations": "#76b7b2", "gradients": "#f28e2b", "workspace": "#bab0ac"}
FG2 = "var(--jp-ui-font-color2, #666)"
BORDER = "var(--jp-border-color2, #ddd)"


def fmt_b(n: int | None) -> str:
    n = int(n or 0)
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def node_steps(data: dict) -> dict[str, list[dict]]:
    """Scheduled steps by the graph node (or "loss", "optimizer") they were built for."""
    out: dict[str, list[dict]] = {}
    for r in data["program"]["steps"]:
        if r.get("node"):
            out.setdefault(r["node"], []).append(r)
    return out


def kernels_of(data: dict, r: dict) -> str:
    """The kernels a scheduled step dispatches, or where it runs (a batch's earlier member), or nothing (a view)."""
    if r["launches"]:
        return ", ".join(data["kernels"][data["launches"][i]["k"]]["name"] for i in r["launches"])
    return f"(in step {r['batched_into']}'s batch)" if r.get("batched_into") is not None else "(no dispatch)"


def head_text(data: dict) -> str:
    d, pr = data["device"], data["program"]
    return (f"stages of {data['spec']['name']}'s training step on {d['backend']}:{d['name']}: batch "
            f"{pr['batch_size']}, tier {pr['tier']}, program {pr['hash'][:12]}")


def explain_text(data: dict) -> str:
    pr, pl = data["program"], data["plan"]
    lines = [head_text(data)]
    if data["device"].get("note"):
        lines.append(f"  note: {data['device']['note']}")
    g = data["graph"]
    lines.append(f"graph: {len(g.get('nodes', []))} nodes, {sum(n.get('params') or 0 for n in g.get('nodes', [])):,} "
                 f"parameters, input {(g.get('input') or {}).get('shape')}")
    by = node_steps(data)
    for n in g.get("nodes", []):
        lines.append(f"  {n['id']:<14} {n['op']:<12} {str(n.get('shape')):<14} {n.get('params') or 0:>10,} params"
                     f"  {len(by.get(n['id'], []))} scheduled steps")
    counts = {ph: [r for r in pr["steps"] if r["phase"] == ph] for ph in PHASES}
    lines.append(f"program: {len(pr['steps'])} scheduled steps, {len(data['launches'])} dispatches of "
                 f"{len(data['kernels'])} kernels: " + ", ".join(f"{ph} {len(rs)}" for ph, rs in counts.items()))
    for ph in PHASES:
        lines.append(f"  {ph}")
        for r in counts[ph]:
            ks = kernels_of(data, r)
            lines.append(f"    {r['pos']:>4} {r['op']:<16} {r['scope']:<14} {str(r['shape']):<14} {ks}")
    lines.append(f"plan: arena {fmt_b(pl['arena_bytes'])} ({len(pl['values'])} values), live peak "
                 f"{fmt_b(pl['live_peak_bytes'])} at step {pl['live_peak_step']}; the whole run's peak "
                 f"{fmt_b(pl['peak_bytes'])} ({pl['verdict']})")
    return "\n".join(lines)


def _arena_svg(data: dict, w: int = 720, h: int = 180) -> str:
    pl, n = data["plan"], max(len(data["program"]["steps"]), 1)
    total = max(pl["arena_bytes"], 1)
    parts = [f'<rect width="{w}" height="{h}" fill="var(--jp-layout-color2,#f4f4f4)"/>']
    for v in pl["values"]:
        if v["start"] is None:
            continue
        x0, x1 = w * v["start"] / n, w * (v["end"] + 1) / n
        y0, y1 = h * v["offset"] / total, h * (v["offset"] + v["size"]) / total
        parts.append(f'<rect data-value="{v["value"]}" x="{x0:.1f}" y="{y0:.1f}" width="{max(x1 - x0, 1):.1f}" '
                     f'height="{max(y1 - y0, 1):.1f}" fill="{ROLE_COLORS.get(v["role"], "#999")}" stroke="#0004" '
                     f'stroke-width="0.5"><title>value {v["value"]} ({escape(v["op"])}, {escape(v["scope"])}, '
                     f'{v["role"]}): {fmt_b(v["size"])} at offset {v["offset"]}, live steps {v["start"]}-{v["end"]}'
                     f'</title></rect>')
    if pl.get("live_peak_step") is not None:
        x = w * (pl["live_peak_step"] + 0.5) / n
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{h}" stroke="#c62828" stroke-width="1.5" '
                     f'stroke-dasharray="4 3"><title>live peak {fmt_b(pl["live_peak_bytes"])} at step '
                     f'{pl["live_peak_step"]}</title></line>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" height="{h}" '
            f'preserveAspectRatio="none" style="display:block" role="img" aria-label="arena offsets over the schedule">'
            f'{"".join(parts)}</svg>')


def explain_html(data: dict) -> str:
    """The whole explorer as static HTML: spec, graph table, schedule by phase, arena chart, each kernel's WGSL."""
    pr, pl = data["program"], data["plan"]
    sec = "margin:8px 0 2px;font-weight:600"
    out = [f'<div style="font-weight:600">{escape(head_text(data))}</div>']
    if data["device"].get("note"):
        out.append(f'<div style="color:{FG2};font-size:11px">note: {escape(data["device"]["note"])}</div>')
    out.append(f'<details><summary style="{sec}">Spec</summary><pre style="font-size:11px;margin:2px 0">'
               f'{escape(data["spec"]["text"])}</pre></details>')
    by = node_steps(data)
    rows = "".join(f'<tr data-node="{escape(n["id"])}"><td{L}><code>{escape(n["id"])}</code></td><td{L}>{escape(n["op"])}</td>'
                   f'<td{L}>{escape(str(n.get("shape")))}</td><td style="text-align:right">{n.get("params") or 0:,}</td>'
                   f'<td style="text-align:right">{sum(len(r["launches"]) for r in by.get(n["id"], []))}</td></tr>'
                   for n in data["graph"].get("nodes", []))
    th = f"<tr><th{L}>node</th><th{L}>op</th><th{L}>shape</th><th>parameters</th><th>dispatches</th></tr>"
    out.append(f'<div style="{sec}">Graph</div><table cellpadding="2" style="border-collapse:collapse;font-size:12px">{th}{rows}</table>')
    out.append(f'<div style="{sec}">Program: {len(pr["steps"])} steps, {len(data["launches"])} dispatches</div>')
    body = []
    for ph in PHASES:
        rs = [r for r in pr["steps"] if r["phase"] == ph]
        body.append(f'<tr><td colspan="5" style="text-align:left;font-weight:600;padding-top:4px">{ph} ({len(rs)})</td></tr>')
        for r in rs:
            ks = kernels_of(data, r)
            body.append(f'<tr data-pos="{r["pos"]}"><td style="text-align:right">{r["pos"]}</td><td{L}>{escape(r["op"])}</td>'
                        f'<td{L}>{escape(r["scope"])}</td><td{L}>{escape(str(r["shape"]))}</td><td{L}><code>{escape(ks)}</code></td></tr>')
    out.append(f'<div style="max-height:360px;overflow-y:auto"><table cellpadding="2" style="border-collapse:collapse;font-size:12px">'
               f'{"".join(body)}</table></div>')
    out.append(f'<div style="{sec}">Plan: arena {fmt_b(pl["arena_bytes"])}, live peak {fmt_b(pl["live_peak_bytes"])} at '
               f'step {pl["live_peak_step"]}; whole-run peak {fmt_b(pl["peak_bytes"])} ({pl["verdict"]})</div>'
               + _arena_svg(data)
               + f'<div style="color:{FG2};font-size:11px">x: the schedule (step 0 to {len(pr["steps"]) - 1}); y: arena '
                 f'offset (0 at the top); colour: activations, gradients, workspace</div>')
    ks = "".join(f'<details data-kernel="{escape(k["name"])}"><summary><code>{escape(k["name"])}</code> '
                 f'<span style="color:{FG2}">{escape(k["key"][:80])} · {k["launches"]} dispatch'
                 f'{"es" if k["launches"] != 1 else ""}</span></summary><pre style="font-size:11px;max-height:400px;'
                 f'overflow:auto;border:1px solid {BORDER};padding:4px">{escape(k["wgsl"])}</pre></details>'
                 for k in data["kernels"])
    out.append(f'<div style="{sec}">Kernels: {len(data["kernels"])} (WGSL as the device compiles it)</div>{ks}')
    return (f'<div class="scellis-static scellis-explain" style="font-family:var(--jp-ui-font-family,system-ui,'
            f'sans-serif);font-size:13px;color:var(--jp-ui-font-color1,#222);border:1px solid {BORDER};'
            f'border-radius:4px;padding:8px 10px;max-width:100%;box-sizing:border-box;overflow-x:auto">{"".join(out)}</div>')


__all__ = ["explain_text", "explain_html", "node_steps", "PHASES"]
