"""Device discovery and selection: a GPU (discrete, then integrated) if there is one, else the faster of
the CPU-emulated adapters and the numpy reference, by measured cost.

Why measured: Mesa's llvmpipe is a real Vulkan adapter, but on many machines the numpy reference trains
several times faster (cnn_digits on 2 cores: 13 s against 61 s), so "auto" times a short step on each
non-GPU candidate (executor.probe, registered by the executor package), caches the result per machine
and falls back to a model by adapter type when it cannot measure. A real GPU wins without measuring.
Why loud: a run on a CPU-emulated adapter or on the reference path is correct but slow; the user is
told when the choice is not a real GPU and why, and the choice is recorded on the Device (and in run
records).
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np

from .. import settings
from .._version import __version__
from ..errors import DeviceError, did_you_mean, notice
from .wgpu import webgpu
from .wgpu.runtime import WgpuBackend, program_key
from .reference import ReferenceBackend

ADAPTER_TYPES = {"DiscreteGPU": "discrete", "IntegratedGPU": "integrated", "CPU": "cpu-emulated",
                 "VirtualGPU": "virtual", "Unknown": "unknown"}
AUTO = "auto"
RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "unknown": 3, "cpu-emulated": 4}
GPU_TYPES = ("discrete", "integrated")
# Modelled seconds per probe step, relative to the reference (1.0), for when nothing can be measured
# (SCELLIS_DEVICE_PROBE=0, or the probe failed): llvmpipe measured 4.7x slower on cnn_digits (61 s vs 13 s).
MODEL_COST = {"discrete": 0.02, "integrated": 0.2, "reference": 1.0, "virtual": 2.0, "unknown": 2.0,
              "cpu-emulated": 4.7}


@dataclass
class Device:
    backend: str
    name: str
    adapter_type: str
    limits: dict
    memory_bytes: int
    memory_source: str
    features: list = field(default_factory=list)
    choice: str = ""            # why this device was chosen
    implementation: str = ""    # the WebGPU implementation of a wgpu device: "wgpu-native" or "dawn"
    implementation_version: str = ""
    subgroup_matrix_configs: list = field(default_factory=list)   # Dawn: the adapter's matrix-unit shapes
    _impl: object = field(default=None, repr=False, compare=False)
    _adapter: object = field(default=None, repr=False, compare=False)
    _webgpu: object = field(default=None, repr=False, compare=False)

    @property
    def is_gpu(self) -> bool:
        return self.adapter_type in ("discrete", "integrated")

    @property
    def selector(self) -> str:
        """The name that asks for this kind of device again (a resume's default): its backend, or `browser`."""
        return "browser" if self.implementation == "browser" else self.backend

    @property
    def program_backend(self) -> str:
        """What Programs for this device are compiled and cached under (the WebGPU implementation is part of it)."""
        return program_key(self.backend, self.implementation)

    @property
    def impl(self):
        """The backend object (created on first use)."""
        if self._impl is None:
            if self.backend == "reference":
                self._impl = ReferenceBackend()
            else:
                self._impl = WgpuBackend(self._adapter, self.name, self.memory_bytes, self._webgpu)
        return self._impl

    def fresh_impl(self):
        """A new backend object on this device, sharing nothing (for isolated memory measurements)."""
        if self.backend == "reference":
            return ReferenceBackend()
        return WgpuBackend(self._adapter, self.name, self.memory_bytes, self._webgpu)

    def gone(self) -> str:
        """Why this device can no longer run anything (a browser page that closed or reloaded), or "": a run
        that is not stepping (paused) learns of it here rather than at its next step."""
        g = getattr(self._adapter, "gone", None) if self.implementation == "browser" else None
        return g() if callable(g) else ""

    @property
    def via(self) -> str:
        """The WebGPU implementation and its version in words ("dawn 0.32.0.4"); "" for the reference."""
        return f"{self.implementation} {self.implementation_version}".strip()

    def to_json(self) -> dict:
        out = {"backend": self.backend, "name": self.name, "adapter_type": self.adapter_type,
               "memory_bytes": self.memory_bytes, "memory_source": self.memory_source,
               "limits": self.limits, "features": self.features, "choice": self.choice}
        if self.backend == "wgpu":
            out["implementation"] = {"name": self.implementation, "version": self.implementation_version}
            out["subgroup_matrix_configs"] = self.subgroup_matrix_configs
        return out

    def __str__(self) -> str:
        via = f" via {self.via}" if self.via else ""
        return (f"{self.backend}:{self.name}{via} ({self.adapter_type}, {self.memory_bytes / 2**30:.1f} GiB "
                f"{self.memory_source})")


def _system_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _nvml_memory() -> int | None:
    try:
        import pynvml  # optional
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
            return int(out[0]) * 2**20 if out else None
        except Exception:
            return None
    return None


def _sysfs_vram() -> int | None:
    for p in sorted(glob.glob("/sys/class/drm/card*/device/mem_info_vram_total")):
        try:
            return int(open(p).read().strip())
        except (OSError, ValueError):
            continue
    return None


def _memory(info: dict, kind: str, limits: dict) -> tuple[int, str]:
    declared = settings.number("SCELLIS_DEVICE_MEMORY")
    if declared:
        return declared, "declared"
    vendor = (info.get("vendor", "") + " " + info.get("device", "")).lower()
    if kind == "discrete" and ("nvidia" in vendor or info.get("vendor_id") == 0x10DE):
        m = _nvml_memory()
        if m:
            return m, "nvml"
    if kind == "discrete":
        m = _sysfs_vram()
        if m:
            return m, "sysfs"
    if kind in ("integrated", "cpu-emulated", "reference"):
        return _system_ram(), "system-ram"
    return int(limits.get("max-buffer-size", 0)), "adapter-max-buffer"


def ensure_xdg_runtime_dir() -> None:
    """Mesa's Vulkan driver warns on stderr when XDG_RUNTIME_DIR is unset: give it a private directory.

    Called before the first adapter enumeration, so a notebook kernel or a script sees no warning either;
    an XDG_RUNTIME_DIR already set is left alone.
    """
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    path = os.path.join(tempfile.gettempdir(), f"scellis-xdg-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            path = tempfile.mkdtemp(prefix="scellis-xdg-")   # someone else's directory: use a fresh one
    except OSError:
        path = tempfile.mkdtemp(prefix="scellis-xdg-")
    os.environ["XDG_RUNTIME_DIR"] = path


def _wgpu_devices() -> list[Device]:
    """Every adapter of every WebGPU implementation SCELLIS_WEBGPU allows (one Device per adapter and
    implementation: an adapter both find is listed twice), best adapter type first, wgpu-native before Dawn."""
    if settings.flag("SCELLIS_NO_WGPU"):
        return []
    ensure_xdg_runtime_dir()
    out = []
    for impl in webgpu.available():
        try:
            adapters = impl.adapters()
        except Exception:
            continue
        for a in adapters:
            info = dict(a.info)
            if info.get("backend_type") not in ("Vulkan", "Metal", "D3D12"):
                continue
            kind = ADAPTER_TYPES.get(info.get("adapter_type", "Unknown"), "unknown")
            limits = dict(a.limits)
            mem, src = _memory(info, kind, limits)
            out.append(Device("wgpu", info.get("device") or info.get("description") or "adapter", kind,
                              limits, mem, src, sorted(a.features), implementation=impl.name,
                              implementation_version=impl.version,
                              subgroup_matrix_configs=impl.subgroup_matrix_configs(a), _adapter=a, _webgpu=impl))
    out.sort(key=lambda d: (RANK.get(d.adapter_type, 9), webgpu.NAMES.index(d.implementation)))
    return out


@dataclass(frozen=True)
class Cost:
    """What one step costs on a device: seconds of the probe step (`source` "probe" or "cached"), or the
    model's relative figure ("model")."""

    seconds: float
    source: str

    def text(self) -> str:
        if self.source == "model":
            return f"{self.seconds:g}x the reference's time (modelled by adapter type)"
        return f"{self.seconds * 1e3:.1f} ms a probe step ({'measured' if self.source == 'probe' else 'measured earlier'})"


_PROBE: dict = {}


def set_probe(fn) -> None:
    """Install the function `auto` times devices with: fn(Device) -> seconds of one small training step."""
    _PROBE["fn"] = fn


def _cost_key(d: Device) -> str:
    extra = f"numpy {np.__version__}, {os.cpu_count()} cpus" if d.backend == "reference" else d.adapter_type
    via = f" via {d.via}" if d.via else ""
    return f"{__version__} | {d.backend}:{d.name}{via} | {extra}"


def cost_cache_path() -> str:
    """Where measured costs are kept between processes: $SCELLIS_CACHE_DIR, else $XDG_CACHE_HOME/scellis,
    else ~/.cache/scellis; the file is device-costs.json."""
    return str(settings.cache_dir() / "device-costs.json")


def _read_costs() -> dict:
    try:
        with open(cost_cache_path()) as f:
            got = json.load(f)
        return got if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cost(key: str, seconds: float) -> None:
    path = cost_cache_path()
    costs = _read_costs()
    costs[key] = seconds
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(costs, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass                          # a read-only home: measured again next time


def measured_cost(d: Device) -> Cost:
    """The cost of `d`: this process's measurement, else the per-machine cache, else a fresh probe (cached),
    else the model by adapter type (no probe installed, SCELLIS_DEVICE_PROBE=0, or the probe failed)."""
    key = _cost_key(d)
    if key in _CACHE.setdefault("costs", {}):
        return _CACHE["costs"][key]
    cost = None
    fn = _PROBE.get("fn")
    if settings.flag("SCELLIS_DEVICE_PROBE") and fn is not None:
        got = _read_costs().get(key)
        if isinstance(got, (int, float)) and got > 0:
            cost = Cost(float(got), "cached")
        else:
            try:
                cost = Cost(float(fn(d)), "probe")
                _write_cost(key, cost.seconds)
            except Exception:         # a driver that cannot run the probe: the model decides
                cost = None
    if cost is None:
        cost = Cost(MODEL_COST.get(d.adapter_type, 2.0), "model")
    _CACHE["costs"][key] = cost
    return cost


def choose(candidates: list[Device], cost=None) -> tuple[Device, str]:
    """The device `auto` takes among `candidates` (the reference among them), and why, in words.

    A GPU wins without measuring (discrete before integrated). Otherwise the lowest cost wins
    (`cost(Device) -> Cost`, default `measured_cost`); when any figure is modelled, all are, so that
    measured seconds are never compared with modelled ratios. Ties keep the given order.
    """
    gpus = [d for d in candidates if d.adapter_type in GPU_TYPES]
    if gpus:
        d = min(gpus, key=lambda x: RANK[x.adapter_type])
        why = f"auto: {d.adapter_type} GPU (a GPU always wins over the reference)"
        same = [x for x in gpus if x.name == d.name and x.adapter_type == d.adapter_type]
        if len(same) > 1:           # one adapter through both WebGPU implementations: the faster step wins
            impl, how = choose_implementation(same, cost)
            return impl, f"{why}; {how}"
        return d, why
    if len(candidates) == 1:
        return candidates[0], "auto: best available"
    costs = [(cost or measured_cost)(d) for d in candidates]
    if any(c.source == "model" for c in costs):
        costs = [Cost(MODEL_COST.get(d.adapter_type, 2.0), "model") for d in candidates]
    i = min(range(len(candidates)), key=lambda j: costs[j].seconds)
    best = candidates[i]
    others = "; ".join(f"{d.backend}:{d.name} {c.text()}" for j, (d, c) in enumerate(zip(candidates, costs)) if j != i)
    return best, f"auto: the fastest here, {best.backend}:{best.name} {costs[i].text()}, against {others}"


def choose_implementation(same: list[Device], cost=None) -> tuple[Device, str]:
    """Among one adapter's Devices through different WebGPU implementations, the one whose probe step is
    faster (measured once per machine and cached, as the CPU choice is), and why. Where nothing could be
    measured, wgpu-native (the first) is kept."""
    costs = [(cost or measured_cost)(d) for d in same]
    if any(c.source == "model" for c in costs):
        return same[0], f"{same[0].via} (not measured: the implementations were not timed)"
    i = min(range(len(same)), key=lambda j: costs[j].seconds)
    others = "; ".join(f"{d.via} {c.text()}" for j, (d, c) in enumerate(zip(same, costs)) if j != i)
    return same[i], f"through {same[i].via}, {costs[i].text()}, against {others}"


def _reference() -> Device:
    mem, src = _memory({}, "reference", {})
    return Device("reference", "numpy", "reference", {"max-storage-buffer-binding-size": None}, mem, src)


_CACHE: dict = {}


def devices() -> list[Device]:
    """Every usable device, best first; the reference device is always last."""
    if "all" not in _CACHE:
        _CACHE["all"] = _wgpu_devices() + [_reference()]
    return _CACHE["all"]


def _not_a_gpu(d: Device, why: str) -> None:
    """The not-a-GPU banner, said once per device and process: asking for the same device by another name
    (auto, then "reference") is no news, and a notebook would repeat it in every model cell."""
    told = _CACHE.setdefault("not-a-gpu told", set())
    if str(d) not in told:
        told.add(str(d))
        notice(f"scellis: running on {d} - NOT a GPU ({why}); results are correct but slow.")


def device(name: str | None = None) -> Device:
    """The device to run on: by name ('wgpu', 'reference', or part of an adapter's name), else the best.

    None and "auto" (a spec's default `[plan] device`) mean: $SCELLIS_DEVICE if set, else the best.
    """
    if "unknown-settings" not in _CACHE:
        _CACHE["unknown-settings"] = stray = settings.unknown()
        if stray:
            notice(f"scellis: {'; '.join(stray)}: not a setting scellis reads (`scellis settings` lists them).")
    if name in (None, "", AUTO):
        name = default_name()
    if name == AUTO:
        name = None
    key = ("pick", name)
    if key in _CACHE:
        return _CACHE[key]
    if name == webgpu.BROWSER:
        return browser_device()
    if name == "reference":
        d = _CACHE.setdefault("ref", _reference())
        d.choice = "asked for reference; not a GPU (as asked)"
        _not_a_gpu(d, "as asked")
        _CACHE[key] = d
        return d
    all_ = devices()
    wanted = webgpu.wanted()
    if wanted != AUTO and len(all_) == 1:
        raise DeviceError(f"SCELLIS_WEBGPU={wanted}, but {wanted} finds no adapter", where="device selection",
                          hint=_auto_would_choose(wanted))
    if name is None:
        d, d.choice = choose(all_)
    else:
        by_impl = name in webgpu.NAMES
        matches = [x for x in all_[:-1] if name == "wgpu" or (x.implementation == name if by_impl
                                                              else name.lower() in x.name.lower())]
        if by_impl and not matches:
            raise DeviceError(f"no adapter is found through {name}", where="device selection",
                              hint=_auto_would_choose(name))
        if not matches:
            names = (["wgpu"] if len(all_) > 1 else []) + ["reference"] + [x.name for x in all_[:-1]]
            raise DeviceError(f"no device matches {name!r}", where="device selection",
                              hint=" ".join(filter(None, [did_you_mean(name, names), f"available: {', '.join(names)}"]))
                              + ("" if len(all_) > 1 else "; no wgpu adapter was found (install a Vulkan driver, "
                                 "e.g. Debian's mesa-vulkan-drivers)"))
        if len(matches) > 1:
            d, why = choose(matches)
            d.choice = f"asked for {name!r}; {why.removeprefix('auto: ')}"
        else:
            d = matches[0]
            d.choice = f"asked for {name!r}"
    if not d.is_gpu:
        if name is not None:
            why = "as asked"
        elif len(all_) == 1:
            why = "no GPU adapter found"
        else:
            why = "no GPU adapter found; " + d.choice.removeprefix("auto: the ")
        _not_a_gpu(d, why)
        d.choice += f"; not a GPU ({'as asked' if name is not None else 'no GPU adapter found'})"
    _CACHE[key] = d
    return d


BROWSER_BUDGET = 1 << 30   # what the planner plans against on the page when nothing is declared


def _available_names() -> str:
    all_ = devices()
    return ", ".join((["wgpu"] if len(all_) > 1 else []) + ["reference"] + [x.name for x in all_[:-1]])


def _naming_devices(e: DeviceError) -> DeviceError:
    """The browser device's refusal `e` (no page shows the notebook, or it went) with the devices there are."""
    d = e.diagnostic
    hint = f"available here: {_available_names()}" + (f"; {d.hint}" if d.hint else "")
    return DeviceError(d.message, where="device selection", hint=hint)


def browser_device() -> Device:
    """The `browser` device: the WebGPU adapter of the page that shows the notebook, reached through the
    transport the front-end registered (backends/wgpu/browser.py). Refused before any compute, naming why and
    the devices there are, when no front-end is attached or its page has no WebGPU."""
    from .wgpu import browser
    try:
        t = browser.transport()          # the front-end's widget is shown and its page's hello awaited here
    except DeviceError as e:
        raise _naming_devices(e) from None
    if t is None:
        raise DeviceError("no front-end is attached to this kernel: the browser device runs on the WebGPU of the "
                          "page that shows the notebook", where="device selection",
                          hint=f"available here: {_available_names()}; in JupyterLab or Notebook, `%load_ext "
                               f"scellis_jupyter` first (a headless kernel or nbconvert has no page)")
    key = ("browser", id(t), getattr(t, "generation", 0))     # a new page (a reload): a new device
    if key in _CACHE:
        return _CACHE[key]
    try:
        hello = browser.hello(t)
    except DeviceError as e:          # the page went between its hello and this question
        raise _naming_devices(e) from None
    except Exception as e:
        raise DeviceError(f"the notebook's page did not answer: {getattr(e, 'message', None) or e}",
                          where="device selection", hint=f"available here: {_available_names()}") from None
    if not hello.get("gpu"):
        raise DeviceError(f"the notebook's page has no WebGPU: {hello.get('why', 'no adapter')}",
                          where="device selection",
                          hint=f"available here: {_available_names()}; WebGPU needs Chrome or Edge 113+, Safari 26+ "
                               "or Firefox 141+, on https or localhost")
    impl = webgpu.load(webgpu.BROWSER)
    a = browser.Adapter(t, hello)
    info = a.info
    kind = "cpu-emulated" if info.get("adapter_type") == "CPU" else "unknown"
    declared = settings.number("SCELLIS_DEVICE_MEMORY")
    mem, src = (declared, "declared") if declared else \
        (BROWSER_BUDGET, "a budget: WebGPU reports no free memory; SCELLIS_DEVICE_MEMORY declares another")
    d = Device("wgpu", f"browser {info['device']}", kind, dict(a.limits), mem, src, sorted(a.features),
               choice=f"asked for 'browser': the WebGPU adapter of {a.where}", implementation=webgpu.BROWSER,
               implementation_version=browser.agent(hello) or impl.version, _adapter=a, _webgpu=impl)
    if not d.is_gpu:
        _not_a_gpu(d, "as asked: the page's adapter is a CPU one")
    _CACHE[key] = d
    return d


def default_name() -> str | None:
    """The device a run naming none takes: `%scellis device NAME`'s choice, else SCELLIS_DEVICE (None: the best)."""
    return _CACHE.get("default") or settings.text("SCELLIS_DEVICE")


def use(name: str | None) -> Device:
    """Make `name` the device this process's runs take when they name none (`%scellis device NAME`; over
    SCELLIS_DEVICE); None or "auto": back to the setting. Refused, with nothing changed, when unavailable."""
    d = device(name)
    _CACHE["default"] = None if name in (None, "", AUTO) else name
    return d


def _auto_would_choose(missing: str) -> str:
    """A hint naming what `auto` finds without `missing` (an implementation), for the device refusals."""
    other = [n for n in webgpu.NAMES if n != missing and webgpu.load(n) is not None]
    found = []
    for n in other:
        impl = webgpu.load(n)
        try:
            found += [f"{a.info.get('device') or 'adapter'} through {n}" for a in impl.adapters()
                      if a.info.get("backend_type") in ("Vulkan", "Metal", "D3D12")]
        except Exception:
            pass
    what = "Dawn needs a Vulkan 1.1+, Metal or D3D12 driver it accepts" if missing == webgpu.DAWN else \
        "wgpu-native needs a Vulkan, Metal or D3D12 driver"
    return (f"{what}; SCELLIS_WEBGPU=auto would choose " + (found[0] if found else "the numpy reference")
            + ("" if found else " (no adapter through any implementation)"))


def main_json() -> str:
    return json.dumps(device().to_json(), indent=2, default=str)
