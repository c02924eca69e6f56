"""GpuDevice: the widget through which the kernel's engine runs on the WebGPU of the page showing the notebook
(the `browser` device, backends/wgpu/browser.py), and `CommTransport`, the browser device's transport over it.

The wait: the kernel's readbacks are synchronous, but a comm reply reaches Python only when some thread of the
kernel dispatches it. A run in a background thread (%scellis train) would be answered on the main thread once the
cell returns; a call in the cell itself (sc.device("browser"), a plan, `%scellis wait`, eager tensors) blocks that
thread. So the replies are routed to a kernel subshell of their own (ipykernel 7 runs one shell per thread, and
routes a comm's messages by `_reply_subshell_for`): they are dispatched there whatever the main thread does, and
the waiting thread, any thread, wakes on a threading.Event. Without that routing (ipykernel 6, checked by `_reply_subshell_for`) only a background
thread may wait; a wait on the main thread is refused with that reason rather than hanging.
"""
from __future__ import annotations

import itertools
import threading

import anywidget
import traitlets as t

from ...errors import DeviceError, DeviceGone
from ._base import bundle

ANSWER_S = 120.0        # no answer in this long: the page is gone (closed, reloaded, asleep)
READY_S = 30.0          # no hello in this long: no page shows the notebook (nbconvert, a headless kernel)


class GpuDevice(anywidget.AnyWidget):
    """The page's GPU serving the kernel: messages {type: "gpu", id, msg} and their replies."""

    _esm, _css = bundle("gpu_device")
    status = t.Unicode("browser GPU: waiting for the page").tag(sync=True)
    state = t.Unicode("waiting").tag(sync=True)     # waiting | ready | no-webgpu | gone

    def _repr_mimebundle_(self, **kw):
        got = super()._repr_mimebundle_(**kw)
        if isinstance(got, tuple):
            got[0]["text/plain"] = self.status
        elif isinstance(got, dict):
            got["text/plain"] = self.status
        return got


class CommTransport:
    """backends.wgpu.browser.Transport over a GpuDevice's comm."""

    def __init__(self, widget: GpuDevice):
        self.widget = widget
        self._ids = itertools.count(1)
        self._waiting: dict = {}
        self._lock = threading.Lock()
        self.hello: dict | None = None
        self._ready = threading.Event()
        self.visibility = "visible"
        self.reloads = 0
        self.wake_lock = ""              # "off" (not ticked), "held", or why the page could not hold one
        self._watchers: list = []
        self.page: str | None = None     # the page that owns the GPU work
        self.gone = False
        self.generation = 0              # which page: the browser device is cached per page
        self.requests = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.subshell = _reply_subshell()
        comm = getattr(widget, "comm", None)
        if comm is not None and self.subshell is not None:
            sub = self.subshell
            comm._reply_subshell_for = lambda data, default: sub       # every message of this comm, there
        widget.on_msg(self._on_msg)

    def describe(self) -> str:
        return "the notebook's page"

    # ---- from the page ---------------------------------------------------------------------------------
    def _on_msg(self, _w, content, buffers) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ready":
            page = content.get("page")
            if self.page is None or self.gone:    # the first page owns the GPU work; after it went, the next one
                self.page, self.gone = page, False
                self.generation += 1
                self.hello = content.get("hello") or {}
                self._ready.set()
        elif kind == "bye":
            if content.get("page") == self.page and self.page is not None:
                self._page_gone("the notebook's page was closed or reloaded: what it held on its GPU is gone")
        elif kind == "gpu-reply":
            with self._lock:
                slot = self._waiting.pop(content.get("id"), None)
            if slot is not None:
                bufs = [bytes(b) for b in (buffers or [])]
                self.bytes_received += sum(len(b) for b in bufs)
                slot[1] = (content.get("reply") or {}, bufs)
                slot[0].set()
        elif kind == "visibility" and content.get("page") == self.page:
            self.visibility = str(content.get("state", ""))
            if "wake_lock" in content:
                self.wake_lock = str(content.get("wake_lock") or "")
            for fn in list(self._watchers):
                try:
                    fn(self.note())
                except Exception:          # noqa: BLE001 - a broken view must not stop the page's replies
                    pass

    def note(self) -> str:
        """What a run panel says about the page: "" while it is visible, else that a hidden tab is throttled."""
        if self.visibility == "hidden":
            return ("The notebook's tab is hidden: the browser throttles a hidden tab, so training on its GPU slows or "
                    "stops until the tab is shown again.")
        if self.wake_lock == "off":
            return ("A sleeping screen stops training on the tab's GPU: tick \"keep the screen awake\" on the browser "
                    "GPU widget (where %scellis device browser ran) to let the browser keep it on.")
        if self.wake_lock and self.wake_lock != "held":
            return f"The page could not keep the screen awake ({self.wake_lock}): a sleeping screen stops training."
        return ""

    def watch(self, fn) -> "callable":
        """Call fn(note) whenever the page's visibility changes; returns the unsubscribe function."""
        self._watchers.append(fn)
        return lambda: self._watchers.remove(fn) if fn in self._watchers else None

    def _page_gone(self, why: str) -> None:
        """Every waiting request fails as DeviceGone (its run ends interrupted); the next page to say hello owns
        the GPU work from then on (a new device: the `browser` device is asked anew)."""
        self.gone = True
        self.reloads += 1
        self._ready.clear()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for slot in waiting.values():
            slot[1] = ({"error": why, "gone": True}, [])
            slot[0].set()

    # ---- to the page -----------------------------------------------------------------------------------
    def _wait(self, ev: threading.Event, seconds: float, what: str) -> None:
        self._can_wait(what)
        if not ev.wait(seconds):
            raise DeviceGone(f"the notebook's page did not answer {what} within {seconds:.0f} s (closed, reloaded or "
                              "asleep?)", where="device browser",
                              hint="reopen the notebook's tab; the run's last checkpoint resumes it")

    def _can_wait(self, what: str) -> None:
        if self.subshell is None and threading.current_thread() is threading.main_thread():
            raise DeviceError(f"{what} cannot be waited for on the kernel's main thread: this kernel delivers the "
                              "page's answers only between cells (this ipykernel routes no comm to a subshell; 7.4 does)",
                              where="device browser", hint="train in the background (%scellis train NAME, without "
                                                           "--wait), or upgrade ipykernel (7.4 routes comms to subshells)")

    def ready(self, seconds: float | None = None) -> dict:
        """The page's hello (it sends it when the widget's model is created). No page ever having said it is a
        kernel without a front-end (nbconvert, a headless kernel) or one that shows no widgets: refused as such."""
        seconds = READY_S if seconds is None else seconds
        if self.hello is None and self.page is None:
            self._can_wait("the widget's hello")
            if not self._ready.wait(seconds):
                raise DeviceError(f"no page showed the browser device's widget within {seconds:.0f} s: this kernel "
                                  "has no front-end showing it (nbconvert, a headless kernel), or the front-end "
                                  "shows no widgets", where="device browser",
                                  hint="open the notebook in JupyterLab or Notebook 7 (with WebGPU: Chrome or Edge "
                                       "113+, Safari 26+), or choose another device")
            return self.hello
        self._wait(self._ready, seconds, "the widget's hello")
        return self.hello

    def request(self, message: dict, buffers=()) -> tuple[dict, list[bytes]]:
        if message.get("op") == "hello" and self.hello is not None and not self.gone:
            return self.hello, []
        if self.gone and message.get("op") == "batch":
            return {"error": "the notebook's page that held this device is gone (closed or reloaded)", "gone": True}, []
        self.ready()
        rid = f"gpu-{next(self._ids)}"
        slot = [threading.Event(), None]
        with self._lock:
            self._waiting[rid] = slot
        bufs = [memoryview(b) for b in buffers]
        self.requests += 1
        self.bytes_sent += sum(b.nbytes for b in bufs)
        self.widget.send({"type": "gpu", "id": rid, "page": self.page, "msg": message}, bufs)
        try:
            self._wait(slot[0], ANSWER_S, f"a {message.get('op')} message")
        finally:
            with self._lock:
                self._waiting.pop(rid, None)
        return slot[1]


def _reply_subshell() -> str | None:
    """A kernel subshell for the page's replies (ipykernel 7), created on the shell channel thread; None where
    there are none (no kernel, or an ipykernel without comm routing to subshells)."""
    try:
        from ipykernel.comm.comm import BaseComm
        from ipykernel.kernelbase import Kernel
        if not Kernel.initialized() or not hasattr(BaseComm, "_reply_subshell_for"):   # routing by comm: 7.4+
            return None
        k = Kernel.instance()
        sct = getattr(k, "shell_channel_thread", None)
        if sct is None or not getattr(k, "_supports_kernel_subshells", False):
            return None
        box: dict = {}
        done = threading.Event()

        def make() -> None:
            try:
                box["id"] = sct.manager._create_subshell()
            finally:
                done.set()
        sct.io_loop.add_callback(make)
        done.wait(10)
        return box.get("id")
    except Exception:
        return None


_CURRENT: list = []


def current() -> "CommTransport | None":
    """This kernel's page transport, once the browser device was asked for."""
    return _CURRENT[0] if _CURRENT else None


def comm_transport() -> CommTransport:
    """The browser device's transport in this kernel: a GpuDevice shown in the current cell's output, once its
    page has said hello. Registered by `%load_ext scellis_jupyter` (backends.wgpu.browser.set_transport)."""
    from IPython.display import display
    w = GpuDevice()
    tr = CommTransport(w)
    _CURRENT[:] = [tr]
    display(w)
    h = tr.ready()
    if h.get("gpu"):
        i = h.get("info") or {}
        from ...backends.wgpu.browser import agent
        w.status = f"browser GPU: {i.get('vendor', '')} {i.get('architecture', '')} ({agent(h) or 'this browser'})"
        w.state = "ready"
    else:
        w.status = f"browser GPU: none ({h.get('why', '')})"
        w.state = "no-webgpu"
    return tr
