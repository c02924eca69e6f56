"""Compile a WGSL kernel into a shader module, with or without the compiler's runtime checks.

naga guards every dynamically indexed array (workgroup tiles, private arrays) with a clamp and puts a
counter in every loop, so a bad index or an endless loop cannot escape the shader. The kernels here
index their tiles by construction and bound their loops by their parameters, and on Vulkan storage
buffers keep the driver's robust access either way; wgpu-native's trusted shader modules
(`wgpuDeviceCreateShaderModuleTrusted`, not in the WebGPU API that wgpu-py wraps) leave the checks out.
On Dawn (Tint) there is no per-module switch: `none` opens the device with Dawn's toggles
`disable_robustness` and `skip_validation` (webgpu.py), every other policy keeps Tint's checks.
SCELLIS_WGPU_SHADER_CHECKS picks: `auto` (the default: `none` for the kernels in TRUSTED on a Vulkan adapter,
`naga` for everything else), `naga` (both everywhere: Metal and D3D12 have no robust buffer access to fall
back on), `bounds` (clamps only), `loops` (loop counters only), `none` (everywhere: 1-3% off the f32 GPT step
and 5% off the mixed one on an H100, benchmarks/RESULTS.md 2026-12-06).

TRUSTED: the tiled matmul, whose workgroup tiles are indexed by the invocation id and constants only (every index
is below the tile's length by construction, matmul.py) and whose one loop runs from the chunk's k start to its
end by BK. Unchecked, the 128x256 tile ran 8192^3 at 41.7-42.1 TFLOP/s against 39.7 checked, and the mixed-f16 GPT
step ran about 10% faster (H100, RESULTS.md 2026-12-06 10:10); storage reads and writes stay under Vulkan's robust
buffer access either way. And the score path's row kernels of attention (kernels/attention_scores.wgsl): their
workgroup arrays are indexed by the local invocation index and a tree stride below the row's threads, their
loops run over keys and head sizes from the params by a constant stride, and the mask's broadcast loop is
capped at rank 4. Unchecked, B4 H16 L1024 D64 attention ran forward in 1.028 ms against 1.152 checked, and
fwd+bwd at L 4096 in 23.46 ms against 23.80 (H100, RESULTS.md 2026-12-06 15:00).
"""
from __future__ import annotations

import re

from ... import settings

_CHECKS = {"naga": 0x1 | 0x2, "bounds": 0x1, "loops": 0x2, "none": 0x0}   # WGPUShaderRuntimeChecks bits


# kernel names (a pipeline key's first field) `auto` compiles unchecked on Vulkan
TRUSTED = frozenset({"matmul", "attention_scores"})


def checks() -> str:
    """The checks policy in effect (SCELLIS_WGPU_SHADER_CHECKS)."""
    return settings.choice("SCELLIS_WGPU_SHADER_CHECKS")


def mode_for(policy: str, kernel: str, backend_type: str, implementation: str = "wgpu-native") -> str:
    """The checks (a key of _CHECKS) kernel `kernel` compiles with under `policy` on an adapter of wgpu backend
    `backend_type` ("Vulkan", "Metal", ...). On Dawn the checks are the device's (robustness and validation off
    only under `none`, for every kernel): `naga` stands for Tint's own checks, whatever the kernel."""
    if implementation in ("dawn", "browser"):
        return "none" if policy == "none" and implementation == "dawn" else "naga"
    if policy != "auto":
        return policy
    return "none" if kernel in TRUSTED and backend_type.lower() == "vulkan" else "naga"


def create_trusted(device, code: str, mode: str, label: str = ""):
    """A shader module of `code` on `device` (a wgpu-native GPUDevice of wgpu-py) under the checks `mode` (a key
    of SCELLIS_WGPU_SHADER_CHECKS other than `naga`), through wgpu-native's trusted entry point. Dawn has no such
    entry point: there the device's toggles decide (webgpu.Implementation.create_module)."""
    from wgpu.backends.wgpu_native import _api    # wgpu-py's cffi bindings of wgpu-native

    src = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(code))
    src[0].chain.next = _api.ffi.NULL
    src[0].chain.sType = _api.lib.WGPUSType_ShaderSourceWGSL
    desc = _api.new_struct_p("WGPUShaderModuleDescriptor *", nextInChain=_api.ffi.cast("WGPUChainedStruct *", src),
                             label=_api.to_c_string_view(label))
    handle = _api.libf.wgpuDeviceCreateShaderModuleTrusted(device._internal, desc, _CHECKS[mode])
    if handle == _api.ffi.NULL:
        raise RuntimeError("shader module creation failed")
    return _api.GPUShaderModule(label, handle, device)


def compile_message(e: Exception, code: str = "") -> str:
    """A shader compiler's message, shortened to its error lines, and the kernel's source line it points at (Tint's
    and naga's messages both name `:line:col`)."""
    text = str(e)
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    keep = [ln for ln in lines if "error" in ln.lower() or re.search(r":\d+:\d+", ln)]
    msg = " | ".join((keep or lines)[:6])[:1500]
    at = re.search(r":(\d+):(\d+)", text)
    src = code.splitlines()
    if at and 0 < int(at.group(1)) <= len(src):
        msg += f" (kernel line {at.group(1)}: `{src[int(at.group(1)) - 1].strip()[:200]}`)"
    return msg
