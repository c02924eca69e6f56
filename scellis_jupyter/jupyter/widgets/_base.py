"""What every Scellis widget shares: its bundled ES module, custom-message dispatch, and the static form.

Why a static form on every widget: a notebook viewed without a kernel (nbconvert HTML, a repository host)
cannot run the live view. Why a separate output for it: nbconvert picks one MIME type per output, and once
the widget's state is saved it picks the widget view, whose manager JS comes from a CDN, so a `text/html`
in the same bundle would never show offline. Displaying a widget therefore gives two outputs: the live view
(`application/vnd.jupyter.widget-view+json` + a one-line `text/plain`) and right after it the static form
(`text/plain` + `text/html`, and the run pin when there is one). The live view hides its static twin
wherever it renders (js/src/lib/fallback.js, by `_static_id`), so Lab shows one copy; `refresh_static()`
re-publishes the static output (by display id) when the state worth keeping changes (a run ends, a fix).
"""
from __future__ import annotations

import html
import threading
import uuid
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t
from IPython.display import display

from ...errors import ScellisError, WidgetError  # noqa: F401 - WidgetError: raised by every widget, imported from here

STATIC = Path(__file__).resolve().parents[2] / "static"

_MISSING_ESM = """
export default { render({ el }) {
  el.textContent = "Scellis widget bundle %s.js is missing: reinstall the package (pip install -e .).";
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

    _static_id = t.Unicode("").tag(sync=True)     # marks the static twin output, which the live view hides

    def __init__(self, **kw):
        super().__init__(**kw)
        self._static_id = uuid.uuid4().hex
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
        """The final state as plain text; each widget says what it shows (the base names the widget)."""
        return type(self).__name__

    def _static_html(self) -> str:
        """The final state as HTML; by default the text form, escaped, in a <pre>."""
        return f"<pre>{html.escape(self._static_text())}</pre>"

    def static_bundle(self) -> tuple[dict, dict]:
        """(data, metadata) of the static output: the final state as text and self-contained HTML/SVG (in a
        `div[data-scellis-static]` the live view hides), plus any extra MIME (a finished run's pin)."""
        html = (f'<div class="scellis-fallback" data-scellis-static="{self._static_id}">{self._static_html()}</div>')
        data = {"text/plain": self._static_text(), "text/html": html, **self.extra_mime}
        return data, {"scellis": {"static_of": self.model_id, "widget": type(self).__name__}}

    def _repr_mimebundle_(self, **kwargs):
        """The live view; its text/plain is one line (the full text form is in the static output after it)."""
        data, md = super()._repr_mimebundle_(**kwargs)
        data = dict(data)
        data["text/plain"] = f"{type(self).__name__} (live view; its static form is the next output)"
        return data, md

    def _ipython_display_(self, **kwargs) -> None:
        data, md = self._repr_mimebundle_()
        display(data, raw=True, metadata=md)
        sdata, smd = self.static_bundle()
        h = display(sdata, raw=True, metadata=smd, display_id=True)
        if h is not None:
            with self._handles_lock:
                self._handles.append(h)

    def refresh_static(self) -> None:
        """Re-publish every static output of this widget, so the saved static form is the current state."""
        with self._handles_lock:
            handles = list(self._handles)
        if not handles:
            return
        data, md = self.static_bundle()
        for h in handles:
            h.update(data, raw=True, metadata=md)
