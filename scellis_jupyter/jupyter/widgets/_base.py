"""What every Scellis widget shares: its bundled ES module, custom-message dispatch, and the static form.

Why a static form on every widget: a notebook viewed without a kernel (nbconvert HTML, a repository host)
renders `text/html`, not the live view; the widget's output carries both, and `refresh_static()` re-publishes
the output (by display id) when the state worth keeping changes (a run ends, a fix is applied).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anywidget
from IPython.display import display

from ...errors import ScellisError, WidgetError  # noqa: F401 - WidgetError: raised by every widget, imported from here

STATIC = Path(__file__).resolve().parents[2] / "static"

_MISSING_ESM = """
export default { render({ el }) {
  el.textContent = "Scellis widget bundle %s.js is missing: reinstall the package (pip install -e .) with Node.js and npm on PATH.";
} };
"""


def bundle(name: str) -> tuple[Any, Any]:
    """(_esm, _css) for a widget: the bundled files when built, else a module that says how to build them."""
    js, css = STATIC / f"{name}.js", STATIC / f"{name}.css"
    return (js if js.exists() else _MISSING_ESM % name), (css if css.exists() else "")


def error_text(e: BaseException) -> str:
    """One line (two with a hint) for a widget to show: the shared diagnostic, never a traceback."""
    if isinstance(e, ScellisError):
        return e.diagnostic.format()
    return f"error[{type(e).__name__}]: {e}"


class ScellisWidget(anywidget.AnyWidget):
    """Base: `_on_<type>(content, buffers)` handles a custom message {"type": ...} from the view."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._handles: list = []
        self._handles_lock = threading.Lock()
        self.extra_mime: dict = {}          # more outputs saved beside the widget (a finished run's pin)
        self.on_msg(self._dispatch)

    def _dispatch(self, _w, content, buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        fn = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) and kind.isidentifier() else None
        if fn is not None:
            fn(content, buffers)

    # ---- the static form ------------------------------------------------------------------------------
    def _static_text(self) -> str:
        raise NotImplementedError

    def _static_html(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        data, md = super()._repr_mimebundle_(**kwargs)
        data = dict(data)
        data["text/plain"] = self._static_text()
        data["text/html"] = self._static_html()
        data.update(self.extra_mime)
        return data, md

    def _ipython_display_(self, **kwargs) -> None:
        data, md = self._repr_mimebundle_()
        h = display(data, raw=True, metadata=md, display_id=True)
        if h is not None:
            with self._handles_lock:
                self._handles.append(h)

    def refresh_static(self) -> None:
        """Re-publish every output showing this widget, so its saved static form is the current state."""
        with self._handles_lock:
            handles = list(self._handles)
        if not handles:
            return
        data, md = self._repr_mimebundle_()
        for h in handles:
            h.update(data, raw=True, metadata=md)
