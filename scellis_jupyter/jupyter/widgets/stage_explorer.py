"""StageExplorer: one training step through every stage, each linked to the next (`%scellis explain NAME`,
`model.explain()`, `sc.explain(spec)`).

The spec; the Graph (nodes, shapes, parameters; the loss and the optimizer beside them); the Program (the
schedule of kernels after fusion, grouped forward / backward / update); the Plan (each arena value's offset
and lifetime drawn over the schedule, with the live peak); and every kernel's WGSL as the device compiles it.
Clicking a node selects its scheduled steps and lists its kernels; clicking a kernel shows its bindings
(buffer, byte range, the value or leaf there, lit in the arena chart) and its WGSL source. The data is
plan.explain.explain's dict, sent once; selection lives in the view (js/src/stage_explorer.js). The static
form (jupyter/explain.py) shows the same stages without a kernel.
"""
from __future__ import annotations

from typing import Any

import traitlets as t

from ._base import ScellisWidget, WidgetError, bundle
from ..explain import explain_html, explain_text

KEYS = ("spec", "device", "graph", "program", "launches", "kernels", "plan")


class StageExplorer(ScellisWidget):
    _esm, _css = bundle("stage_explorer")
    data = t.Dict().tag(sync=True)

    def __init__(self, data: dict):
        if not isinstance(data, dict) or any(k not in data for k in KEYS):
            raise WidgetError("StageExplorer needs the stages of a training step (plan.explain.explain)",
                              where="StageExplorer", hint="sc.explain(spec) makes one")
        super().__init__(data=data)

    @classmethod
    def of(cls, target: Any, **kw) -> "StageExplorer":
        """The stages of `target` (a spec, its text or path, or a notebook model handle) on the device."""
        from ...plan.explain import explain
        spec = getattr(target, "spec", target)
        return cls(explain(spec, **kw))

    def _static_text(self) -> str:
        return explain_text(self.data)

    def _static_html(self) -> str:
        return explain_html(self.data)
