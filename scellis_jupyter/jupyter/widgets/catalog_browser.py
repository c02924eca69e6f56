"""CatalogBrowser: every catalog kind, its entries, each entry's parameters with ranges, and its origin."""
from __future__ import annotations

import math
from html import escape

import traitlets as t

from ._base import ScellisWidget, bundle
from ._static import FG2, box


def _json_safe(v):
    """Strict JSON for the comm (a default of inf becomes the string "inf"); tuples become lists."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


L = "style='text-align:left;vertical-align:top;padding:2px 6px;'"   # nbconvert's CSS right-aligns cells


class CatalogBrowser(ScellisWidget):
    _esm, _css = bundle("catalog_browser")
    entries = t.List().tag(sync=True)

    def __init__(self, entries: list[dict]):
        super().__init__(entries=[_json_safe(dict(e)) for e in entries])

    def _static_text(self) -> str:
        kinds: dict[str, list] = {}
        for e in self.entries:
            kinds.setdefault(e["kind"], []).append(e["name"])
        return "CatalogBrowser\n" + "\n".join(f"  {k} ({len(v)}): {', '.join(v)}" for k, v in sorted(kinds.items()))

    def _static_html(self) -> str:
        rows = []
        for e in sorted(self.entries, key=lambda e: (e["kind"], e["name"])):
            params = "; ".join(f"{escape(k)}: {escape(p.get('type', ''))} = {escape(repr(p.get('default')))}"
                               + (f" in {escape(p['range'])}" if p.get("range") else "")
                               for k, p in (e.get("params") or {}).items())
            rows.append(f"<tr><td {L}>{escape(e['kind'])}</td><td {L}><b>{escape(e['name'])}</b></td><td {L}>"
                        f"{escape(e.get('summary') or '')}</td><td {L[:-1]}font-size:11px'>{params}</td>"
                        f"<td {L[:-1]}color:{FG2};font-size:11px'>{escape(e.get('origin') or '')}</td></tr>")
        table = (f"<table style='border-collapse:collapse'><tr><th {L}>kind</th><th {L}>entry</th>"
                 f"<th {L}>summary</th><th {L}>params</th><th {L}>origin</th></tr>" + "".join(rows) + "</table>")
        return box(f"<div style='font-weight:600'>Catalog ({len(self.entries)} entries)</div>"
                   f"<div style='max-height:360px;overflow:auto'>{table}</div>", "scellis-catalog")
