"""The two WebGPU implementations the wgpu backend runs on: wgpu-native (the `wgpu` package, shader compiler
naga) and Dawn (the `wgpudawn` package: Chrome's own WebGPU, shader compiler Tint).

Why a seam here and nowhere else: both packages speak the same wgpu-py API, so the launchers, the kernels and
the runtime are one code path. What differs lives in `Implementation`: how adapters are found and a device
opened (Dawn's toggles), the names of optional features (`subgroup` / `subgroups`), the `enable` directives
each compiler wants, how a shader module is made unchecked (wgpu-native's trusted modules; Dawn's device
toggles), and the C entry points the raw replay calls. `SCELLIS_WEBGPU` picks one (`auto`: measured).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from types import ModuleType

from ... import settings
from ...errors import DeviceError

NATIVE = "wgpu-native"
DAWN = "dawn"
BROWSER = "browser"     # the notebook page's navigator.gpu, driven from the kernel (browser.py)
NAMES = (NATIVE, DAWN)  # what `auto` looks through; the browser is asked for by name only
TINT = (DAWN, BROWSER)  # compiled by Tint, which keeps WebGPU's rules strictly (aliasing, `enable subgroups;`)

# Dawn's instance toggles: experimental features (subgroup matrices) need `allow_unsafe_apis`; on NVIDIA's
# Vulkan driver Dawn offers `shader-f16` (and the f16 subgroup-matrix configurations) only with the second.
DAWN_INSTANCE_TOGGLES = ("allow_unsafe_apis", "vulkan_enable_f16_on_nvidia")
# Dawn's device toggles that drop checks, for SCELLIS_WGPU_SHADER_CHECKS=none (Dawn has no per-module switch)
DAWN_UNCHECKED_TOGGLES = ("disable_robustness", "skip_validation")

SUBGROUP_MATRIX = "chromium-experimental-subgroup-matrix"

# the engine's names for optional features -> each implementation's
_FEATURES = {
    NATIVE: {"shader-f16": "shader-f16", "timestamp-query": "timestamp-query", "subgroup": "subgroup",
             "shader-int64": "shader-int64"},
    DAWN: {"shader-f16": "shader-f16", "timestamp-query": "timestamp-query", "subgroup": "subgroups",
           "subgroup-matrix": SUBGROUP_MATRIX},
    BROWSER: {"shader-f16": "shader-f16", "subgroup": "subgroups"},
}
# a subgroup builtin function (subgroupAdd, ...) or builtin value (subgroup_size, subgroup_invocation_id, subgroup_id)
_SUBGROUP_USE = re.compile(r"\bsubgroup([A-Z]\w*\s*\(|_size\b|_invocation_id\b|_id\b)")


@dataclass
class Implementation:
    """One WebGPU implementation: its name, version and wgpu-py-API module, and what differs between them."""

    name: str
    version: str
    module: ModuleType = field(repr=False)
    _api: ModuleType | None = field(default=None, repr=False)

    # ---- features --------------------------------------------------------------------------------------
    def feature(self, engine_name: str) -> str | None:
        """This implementation's name of the engine's optional feature `engine_name` (None: it has none)."""
        return _FEATURES[self.name].get(engine_name)

    def engine_features(self, adapter_features) -> set[str]:
        """The engine's names of the optional features an adapter offers."""
        have = set(adapter_features)
        return {e for e, f in _FEATURES[self.name].items() if f in have}

    # ---- adapters and devices ------------------------------------------------------------------------
    def adapters(self) -> list:
        """Every adapter this implementation finds (may be empty). Dawn's warnings about adapters it passes
        over (an old llvmpipe lacks what it needs) are not the user's business while looking: kept quiet."""
        if self.name != DAWN:
            return list(self.module.gpu.enumerate_adapters_sync())
        with _quiet_adapter_warnings():
            return list(self.module.gpu.enumerate_adapters_sync())

    def open_device(self, adapter, features: list[str], limits: dict, unchecked: bool = False):
        """A device on `adapter` with the engine's optional `features` and `limits`; `unchecked`: Dawn's
        robustness and validation off (the caller decides where that is proven safe)."""
        req = [self.feature(f) for f in features if self.feature(f)]
        if self.name in (NATIVE, BROWSER):
            return adapter.request_device_sync(required_features=req, required_limits=limits)
        from wgpudawn.backends.dawn import extras
        toggles = list(DAWN_UNCHECKED_TOGGLES) if unchecked else []
        # a Dawn adapter opens one device: a second device on the same GPU (a fresh backend for an isolated
        # measurement, a probe) asks for the adapter anew
        if getattr(adapter, "_scellis_opened", False):
            adapter = self._same_adapter(adapter)
        dev = extras.request_device_sync(adapter, required_features=req, required_limits=limits,
                                         enable_toggles=toggles)
        adapter._scellis_opened = True
        return dev

    def _same_adapter(self, adapter):
        """A fresh adapter object for the GPU `adapter` names (vendor, device, backend, type)."""
        ident = lambda a: tuple(dict(a.info).get(k) for k in ("vendor_id", "device_id", "device", "backend_type",
                                                               "adapter_type"))
        want = ident(adapter)
        for a in self.adapters():
            if ident(a) == want:
                return a
        raise RuntimeError(f"Dawn no longer finds the adapter {want[2]!r}")

    def subgroup_matrix_configs(self, adapter) -> list[dict]:
        """The subgroup-matrix configurations an adapter lists (Dawn only; [] elsewhere or without the feature):
        dicts of component_type, result_component_type, m, n, k, min/max_subgroup_size."""
        if self.name != DAWN or SUBGROUP_MATRIX not in set(adapter.features):
            return []
        from wgpudawn.backends.dawn import extras
        try:
            return [dict(c) for c in extras.get_adapter_properties(adapter).get("subgroup_matrix_configs", [])]
        except Exception:  # pragma: no cover - an adapter that lists none
            return []

    # ---- shader text and modules -----------------------------------------------------------------------
    def prelude(self, code: str) -> str:
        """`code` with the `enable` directives this compiler needs: Tint wants `enable subgroups;` before
        subgroup builtins, naga refuses the directive (it enables them with the device feature)."""
        if self.name in TINT and "enable subgroups;" not in code and _SUBGROUP_USE.search(code):
            return "enable subgroups;\n" + code
        return code

    def create_module(self, device, code: str, mode: str = "naga", label: str = ""):
        """A shader module of `code`; on wgpu-native `mode` (a key of shaders._CHECKS) picks naga's checks
        through its trusted entry point. Dawn has no per-module checks: its device's toggles decide."""
        code = self.prelude(code)
        if self.name in TINT or mode == "naga":
            return device.create_shader_module(label=label, code=code)
        from . import shaders
        return shaders.create_trusted(device, code, mode, label)

    def raw_calls(self):
        """(set_pipeline, set_bind_group, dispatch, NULL): the C entry points the raw replay calls, or None."""
        if self.name == BROWSER:
            from . import browser
            return browser.raw_calls()
        api = self._api
        try:
            return (api.lib.wgpuComputePassEncoderSetPipeline, api.lib.wgpuComputePassEncoderSetBindGroup,
                    api.lib.wgpuComputePassEncoderDispatchWorkgroups, api.ffi.NULL)
        except Exception:  # pragma: no cover - another package layout: the checked calls are used throughout
            return None


@contextlib.contextmanager
def _quiet_adapter_warnings():
    """Dawn writes a warning straight to the process's stderr for each adapter it passes over ("While
    initializing adapter"); catch fd 2 while it looks and pass on every other line."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):         # no real stderr (some notebook front-ends): nothing to catch
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            blocks = re.split(r"\n(?=\S)", text)
            keep = [b for b in blocks if b.strip() and "While initializing adapter" not in b]
            if keep:
                sys.stderr.write("\n".join(keep).rstrip("\n") + "\n")


_LOADED: dict[str, Implementation | None] = {}


def load(name: str) -> Implementation | None:
    """The implementation `name` if its package imports (None otherwise); Dawn's instance toggles are set on the
    first load, before any adapter is asked for."""
    if name in _LOADED:
        return _LOADED[name]
    impl = None
    try:
        if name == NATIVE:
            import wgpu
            from wgpu.backends.wgpu_native import _api
            impl = Implementation(NATIVE, str(getattr(wgpu, "__version__", "?")), wgpu, _api)
        elif name == DAWN:
            import wgpudawn
            from wgpudawn.backends.dawn import _api, extras
            extras.set_instance_extras(enable_toggles=list(DAWN_INSTANCE_TOGGLES))
            impl = Implementation(DAWN, str(getattr(wgpudawn, "__version__", "?")), wgpudawn, _api)
        elif name == BROWSER:
            from . import browser
            impl = Implementation(BROWSER, f"protocol {browser.PROTOCOL}", browser.module, None)
    except Exception:
        impl = None
    _LOADED[name] = impl
    return impl


def wanted() -> str:
    """SCELLIS_WEBGPU: `auto`, `wgpu-native` or `dawn`."""
    return settings.choice("SCELLIS_WEBGPU")


def available() -> list[Implementation]:
    """The implementations to look for adapters in, per SCELLIS_WEBGPU (`auto`: both that import)."""
    w = wanted()
    names = NAMES if w == "auto" else (w,)
    out = [i for i in (load(n) for n in names) if i is not None]
    if w != "auto" and not out:
        other = [n for n in NAMES if n != w and load(n) is not None]
        raise DeviceError(f"SCELLIS_WEBGPU={w}, but its package does not import "
                          f"({'wgpudawn' if w == DAWN else 'wgpu'})", where="device selection",
                          hint=f"pip install {'wgpudawn' if w == DAWN else 'wgpu'}"
                               + (f"; `auto` would choose {other[0]}" if other else ""))
    return out
