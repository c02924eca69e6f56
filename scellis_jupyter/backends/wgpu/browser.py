"""The third WebGPU implementation: the browser page's `navigator.gpu`, driven from the kernel.

Why a proxy of the wgpu-py API: WgpuBackend (runtime.py) speaks the wgpu-py API subset it needs (buffers, shader
modules, compute pipelines, bind groups, command encoders, compute passes, queue writes and submits, buffer maps),
so the same launchers, kernels, records and replays run on the page when that subset is recorded here as commands
on integer handles and replayed by the page's executor (js/src/lib/webgpu_executor.js). Nothing goes to the page
until the kernel needs an answer (a readback, a new pipeline whose compile errors it must report) or `flush` is
called: a training step costs one or a few messages, not one per dispatch. Buffer contents, shader sources and
pipelines cross once and are referred to by handle afterwards.

The wire is a `Transport`: `request(message, buffers) -> (reply, buffers)`, synchronous. This layer knows no
Jupyter: the jupyter package registers a transport over the widget comm (`set_transport`); tests use a page opened
by Playwright. A message is a JSON-able dict and a list of binary blobs its commands refer to by index.
"""
from __future__ import annotations

import itertools
import re
import threading
from typing import Callable, Protocol, Sequence

from ...errors import DeviceError, DeviceGone, KernelError

NAME = "browser"
PROTOCOL = 1


class Transport(Protocol):
    """How messages reach the page's executor and its replies come back."""

    def request(self, message: dict, buffers: Sequence[bytes]) -> tuple[dict, list[bytes]]:
        """Send one message, wait for the page's reply (raise DeviceError when the page is gone)."""

    def describe(self) -> str:
        """Where the page is, in words (for the device's name and errors)."""


class PageError(RuntimeError):
    """The page refused a batch (a validation error, a lost device); the message is the browser's."""


_TRANSPORT: dict = {}


def set_transport(t: Transport | Callable[[], Transport] | None) -> None:
    """Register the transport (or a function making one on first use) the `browser` device talks through;
    None unregisters it. The jupyter package registers its widget comm here; a script has none."""
    _TRANSPORT.clear()
    if t is not None:
        _TRANSPORT["t"] = t


def transport() -> Transport | None:
    t = _TRANSPORT.get("t")
    if t is not None and not hasattr(t, "request"):
        t = _TRANSPORT["t"] = t()            # a factory: the front-end is asked when the device is
    return t


def _kebab(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), name)


def _camel(name: str) -> str:
    return re.sub(r"-([a-z])", lambda m: m.group(1).upper(), name)


_ids = itertools.count(1)


class _Session:
    """The commands recorded since the last message, and the transport they go through."""

    def __init__(self, t: Transport, device_id: int):
        self.t = t
        self.device_id = device_id
        self.cmds: list = []
        self.blobs: list[bytes] = []
        self.lock = threading.RLock()
        self.send_lock = threading.RLock()
        self.mapped: dict = {}       # buffer id -> the bytes its map read (whichever thread's message carried it)
        self.pipelines: dict = {}    # pipeline id -> (kernel name, source): a compile error names its kernel
        self.messages = 0            # round trips so far
        self.bytes_sent = 0

    def add(self, *cmd) -> None:
        with self.lock:          # backends on one page's device may record from two threads (a run, the cell)
            self.cmds.append(list(cmd))

    def add_with_blob(self, data, *cmd) -> None:
        """A command whose last field is the index of `data` among this message's blobs."""
        with self.lock:
            self.blobs.append(bytes(data))
            self.cmds.append([*cmd, len(self.blobs) - 1])

    def flush(self) -> tuple[dict, list[bytes]]:
        """Send what is recorded (possibly nothing but a ping) and return the page's reply."""
        # messages leave in the order they were cut (a later one may use what an earlier one made); recording goes
        # on meanwhile (only the swap holds the list lock, never a round trip)
        with self.send_lock:
            with self.lock:
                cmds, blobs = self.cmds, self.blobs
                self.cmds, self.blobs = [], []
                self.messages += 1
                self.bytes_sent += sum(len(b) for b in blobs)
            reply, bufs = self.t.request({"op": "batch", "device": self.device_id, "cmds": cmds}, blobs)
        if reply.get("error"):
            if reply.get("pipeline") in self.pipelines:
                from .shaders import compile_message
                label, code = self.pipelines[reply["pipeline"]]
                raise KernelError(f"kernel {label!r} failed to compile on browser: {compile_message(reply['error'], code)}",
                                  where="device browser")
            if reply.get("gone"):
                raise DeviceGone(reply["error"], where="device browser",
                                 hint="the run's last checkpoint resumes it, here or on any other device")
            raise PageError(reply["error"])
        bufs = list(bufs)
        maps = [c[1] for c in cmds if c[0] == "map"]     # the page answers each map, in order
        with self.lock:
            self.mapped.update(zip(maps, bufs))
        return reply, bufs


class _Obj:
    """A handle on the page: an integer id (the page's map key) and wgpu-py's `uid`."""

    def __init__(self, session: _Session, label: str = ""):
        self._s = session
        self.uid = self.id = next(_ids)
        self.label = label

    @property
    def _internal(self):
        """What runtime's raw replay hands to `raw_calls` (the proxy object itself)."""
        return self


class Buffer(_Obj):
    def __init__(self, session, size: int, usage: int, label: str = ""):
        super().__init__(session, label)
        self.size = int(size)
        self.usage = int(usage)
        self._mapped: bytes | None = None
        session.add("buf", self.id, self.size, self.usage)

    def __del__(self):
        try:
            self._s.add("drop", self.id)      # freed on the page with the next message
        except Exception:
            pass

    def map_sync(self, mode="READ", offset: int = 0, size: int | None = None) -> None:
        if str(mode).upper() not in ("READ", "1"):
            raise DeviceError("the browser device maps buffers for reading only", where="device browser")
        self._s.add("map", self.id, int(offset), int(self.size - offset if size is None else size))
        self._s.flush()
        with self._s.lock:
            self._mapped = self._s.mapped.pop(self.id)

    def read_mapped(self, buffer_offset: int = 0, size: int | None = None, copy: bool = True):
        data = self._mapped
        end = len(data) if size is None else buffer_offset + size
        return memoryview(data)[buffer_offset:end]

    def unmap(self) -> None:
        self._mapped = None

    def destroy(self) -> None:
        self._s.add("destroy", self.id)


class ShaderModule(_Obj):
    def __init__(self, session, code: str, label: str = ""):
        super().__init__(session, label)
        self.code = code
        session.add("mod", self.id, code, label)


class BindGroupLayout(_Obj):
    pass


class ComputePipeline(_Obj):
    def __init__(self, session, module: ShaderModule, entry_point: str, label: str = ""):
        super().__init__(session, label)
        session.add("pipe", self.id, module.id, entry_point)
        # compiled on the page while later commands are recorded (the new pipelines of a program compile at once);
        # a compile error comes back with the batch as a KernelError naming the kernel and its line
        session.pipelines[self.id] = (module.label.split(":")[0] or "?", module.code)
        self._layouts: dict = {}

    def get_bind_group_layout(self, index: int) -> BindGroupLayout:
        lay = self._layouts.get(index)
        if lay is None:
            lay = self._layouts[index] = BindGroupLayout(self._s)
            lay.pipeline, lay.index = self.id, index
        return lay


class BindGroup(_Obj):
    def __init__(self, session, layout: BindGroupLayout, entries: list):
        super().__init__(session)
        ents = []
        for e in entries:
            r = e["resource"]
            ents.append([int(e["binding"]), r["buffer"].id, int(r.get("offset", 0)), int(r.get("size", 0))])
        session.add("bg", self.id, layout.pipeline, layout.index, ents)

    def __del__(self):
        try:
            self._s.add("drop", self.id)
        except Exception:
            pass


class ComputePass(_Obj):
    def __init__(self, session, encoder):
        super().__init__(session)
        session.add("pass", self.id, encoder.id)

    def set_pipeline(self, pipeline) -> None:
        self._s.add("setp", self.id, pipeline.id)

    def set_bind_group(self, index: int, group, *_) -> None:
        self._s.add("setbg", self.id, int(index), group.id)

    def dispatch_workgroups(self, x: int, y: int = 1, z: int = 1) -> None:
        self._s.add("disp", self.id, int(x), int(y), int(z))

    def end(self) -> None:
        self._s.add("end", self.id)


class CommandBuffer(_Obj):
    pass


class CommandEncoder(_Obj):
    def __init__(self, session):
        super().__init__(session)
        session.add("enc", self.id)

    def begin_compute_pass(self, **kw) -> ComputePass:
        if kw.get("timestamp_writes"):
            raise DeviceError("timestamp queries are not offered on the browser device", where="device browser")
        return ComputePass(self._s, self)

    def copy_buffer_to_buffer(self, src, src_offset, dst, dst_offset, size) -> None:
        self._s.add("copy", self.id, src.id, int(src_offset), dst.id, int(dst_offset), int(size))

    def finish(self) -> CommandBuffer:
        cb = CommandBuffer(self._s)
        self._s.add("finish", self.id, cb.id)
        return cb


class Queue:
    def __init__(self, session):
        self._s = session

    def write_buffer(self, buffer, buffer_offset, data, data_offset: int = 0, size: int | None = None) -> None:
        mv = memoryview(data).cast("B")
        mv = mv[data_offset:] if size is None else mv[data_offset:data_offset + size]
        self._s.add_with_blob(mv, "write", buffer.id, int(buffer_offset))

    def submit(self, command_buffers) -> None:
        self._s.add("submit", [c.id for c in command_buffers])


class _Lost:
    """device.lost: the page reports a lost device in its replies (PageError); nothing to wait on here."""


class Device(_Obj):
    def __init__(self, session, limits: dict, features: Sequence[str], adapter):
        super().__init__(session)
        self.id = self.uid = session.device_id
        self.limits = limits
        self.features = set(features)
        self.adapter = adapter
        self.queue = Queue(session)
        self.lost = _Lost()
        # the backends on this device (a run's fresh one beside the notebook's) share its compiled pipelines: a
        # browser compiles each kernel once per page, not once per run (SwiftShader takes ~0.3 s a kernel)
        self.scellis_pipeline_cache: dict = {}

    def create_buffer(self, size: int, usage: int, label: str = "", mapped_at_creation: bool = False) -> Buffer:
        return Buffer(self._s, size, usage, label)

    def create_shader_module(self, code: str, label: str = "", **_) -> ShaderModule:
        return ShaderModule(self._s, code, label)

    def create_compute_pipeline(self, layout, compute: dict, label: str = "") -> ComputePipeline:
        return ComputePipeline(self._s, compute["module"], compute.get("entry_point", "main"), label)

    def create_bind_group(self, layout, entries, label: str = "") -> BindGroup:
        return BindGroup(self._s, layout, entries)

    def create_command_encoder(self, label: str = "") -> CommandEncoder:
        return CommandEncoder(self._s)

    def flush(self) -> dict:
        """Send what is recorded now (a step's end, when nothing is read back) and wait for the page."""
        return self._s.flush()[0]

    @property
    def messages(self) -> int:
        return self._s.messages

    @property
    def bytes_sent(self) -> int:
        return self._s.bytes_sent


class Adapter:
    """The page's adapter as `requestAdapter` gave it: info, features and limits in wgpu-py's spelling."""

    def __init__(self, t: Transport, hello: dict):
        self._t = t
        self.info = dict(hello.get("info") or {})
        self.info.setdefault("backend_type", "WebGPU")
        self.info.setdefault("adapter_type", "Unknown")
        self.info["device"] = self.info.get("description") or self.info.get("device") or \
            " ".join(filter(None, [self.info.get("vendor"), self.info.get("architecture")])) or "browser adapter"
        self.features = set(hello.get("features") or [])
        self.limits = {_kebab(k): v for k, v in (hello.get("limits") or {}).items()}
        self.user_agent = hello.get("userAgent", "")
        self.where = t.describe() if hasattr(t, "describe") else "the page"
        self._devices: dict = {}
        self._generation = getattr(t, "generation", 0)      # which page said this hello

    def gone(self) -> str:
        """Why this adapter's page can no longer run anything (closed or reloaded since its hello), or ""."""
        t = self._t
        if getattr(t, "gone", False) or getattr(t, "generation", self._generation) != self._generation:
            return "the notebook's page that held this device is gone (closed or reloaded)"
        return ""

    def request_device_sync(self, required_features=(), required_limits=None, **_) -> Device:
        """The page's device with these features and limits: opened once per page and asked for again by every
        backend (WebGPU devices share nothing, and a page has one GPU to share)."""
        key = (tuple(sorted(required_features)), tuple(sorted((required_limits or {}).items())))
        got = self._devices.get(key)
        if got is not None:
            return got
        session = _Session(self._t, next(_ids))
        reply, _ = self._t.request({"op": "device", "id": session.device_id, "features": list(required_features),
                                    "limits": {_camel(k): v for k, v in (required_limits or {}).items()}}, [])
        if reply.get("error"):
            raise DeviceError(f"the page could not open a WebGPU device: {reply['error']}", where="device browser")
        limits = {_kebab(k): v for k, v in (reply.get("limits") or {}).items()}
        got = self._devices[key] = Device(session, limits, reply.get("features") or [], self)
        return got


def hello(t: Transport) -> dict:
    """Ask the page what it has: {"gpu": bool, "why": str, "info", "features", "limits", "userAgent"}."""
    reply, _ = t.request({"op": "hello", "protocol": PROTOCOL}, [])
    return reply


def agent(hello: dict) -> str:
    """The page's browser and major version from its user agent ("Chrome 156", "Firefox 141"), or ""."""
    ua = hello.get("userAgent", "")
    for name, pat in (("Edge", r"Edg/(\d+)"), ("Firefox", r"Firefox/(\d+)"), ("Chrome", r"Chrome/(\d+)"),
                      ("Safari", r"Version/(\d+).*Safari")):
        m = re.search(pat, ua)
        if m:
            return f"{name} {m.group(1)}"
    return ""


class _Gpu:
    def enumerate_adapters_sync(self) -> list[Adapter]:
        t = transport()
        if t is None:
            return []
        h = hello(t)
        return [Adapter(t, h)] if h.get("gpu") else []


def raw_calls():
    """(set_pipeline, set_bind_group, dispatch, NULL) over proxies, for runtime's raw replay: recording a
    dispatch here is already cheap, and the executor's quick replay needs the four."""
    return (lambda p, pl: p.set_pipeline(pl), lambda p, i, bg, n, null: p.set_bind_group(i, bg),
            lambda p, x, y, z: p.dispatch_workgroups(x, y, z), None)


class _Module:
    """What webgpu.Implementation wants of an implementation's package: `gpu`."""
    gpu = _Gpu()


module = _Module()
