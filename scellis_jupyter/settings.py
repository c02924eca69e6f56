"""Every SCELLIS_* environment setting, declared once: its kind, default and meaning, and one reader each.

Why: the settings were read by hand in a dozen modules. Each module had its own idea of "off" (some took
0 / off / false, some only off). Each had its own idea of a bad value: some refused it, some fell back
silently, one raised a bare ValueError at import. One table gives one spelling and one refusal in the
diagnostic format (`SettingError`, where "environment"). `docs/settings.md` is generated from it
(`scellis settings --markdown`), and `unknown()` catches a misspelled name.

Values are read on every call, not cached: tests and benchmarks change them within one process. Where a
choice is remembered (a recorded program keeps its pipelines), the module that remembers says so.
"""
from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import SettingError, did_you_mean

PREFIX = "SCELLIS_"
ON = ("1", "on", "true", "yes")
OFF = ("0", "off", "false", "no")
KINDS = ("flag", "int", "float", "choice", "text")
GROUPS = {
    "device": "Device and memory",
    "store": "Store and caches",
    "program": "Compiled programs",
    "kernels": "WGSL kernels (switches for measuring; the defaults are what benchmarks/RESULTS.md chose)",
    "pool": "Pools",
    "examples": "Examples, build and tests",
}


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str                       # one of KINDS
    default: object                 # what an unset or empty variable means (None: decided by the reader)
    doc: str                        # one or two sentences: what it changes
    group: str
    choices: tuple = ()             # kind "choice"
    lo: float | None = None         # kinds "int" / "float": the least allowed value
    hi: float | None = None         # ... and the largest
    unit: str = ""                  # "bytes", "microseconds", ... for the refusal and the docs


def _s(name, kind, default, group, doc, **kw) -> Setting:
    return Setting(name, kind, default, doc, group, **kw)


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    # device and memory
    _s("SCELLIS_DEVICE", "text", None, "device",
       "The device runs use: `auto`, `wgpu`, `reference`, `browser` (the WebGPU of the page showing the notebook), or part of an adapter's name (default: the best)."),
    _s("SCELLIS_DEVICE_MEMORY", "int", None, "device",
       "Declare the device's memory in bytes (the planner plans against it) instead of asking the driver.",
       lo=1, unit="bytes"),
    _s("SCELLIS_DEVICE_PROBE", "flag", True, "device",
       "Off: rank devices by a model of their adapter type instead of a measured probe."),
    _s("SCELLIS_NO_WGPU", "flag", False, "device",
       "On: do not look for GPU adapters at all; only the numpy reference device is listed."),
    _s("SCELLIS_MAX_BINDING_BYTES", "int", None, "device",
       "Lower the storage-binding limit (bytes, at least 4096) to exercise tensor splitting.",
       lo=4096, unit="bytes"),
    _s("SCELLIS_WEBGPU", "choice", "auto", "device",
       "Which WebGPU implementation the wgpu backend runs on: `wgpu-native` (the `wgpu` package, shader compiler "
       "naga), `dawn` (the `wgpudawn` package: Chrome's WebGPU, shader compiler Tint), or `auto`: where one "
       "adapter is found through both, the one whose probe step is faster (measured once per machine).",
       choices=("auto", "wgpu-native", "dawn")),
    _s("SCELLIS_WGPU_SUBGROUP_MATRIX", "flag", True, "device",
       "Off: open a Dawn device without `chromium-experimental-subgroup-matrix`, so f16 products run on the "
       "ordinary ALU kernels instead of the matrix units (tensor cores)."),
    _s("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE", "text", None, "kernels",
       "`T:MxNxK[:S]` (e.g. `f32:8x8x8`): run the subgroup-matrix matmul kernels on any adapter with plain WGSL "
       "standing in for the matrix builtins, as configuration T (f16 or f32) MxNxK with subgroups of S (default 32) "
       "invocations; for testing their tiling and edges where no adapter has matrix units. Under prod and fast only."),
    _s("SCELLIS_MATMUL_SGM_TILE", "text", None, "kernels",
       "Force one subgroup-matrix tile (`sgm_w_big`, `sgm_w_wide`, `sgm_w_mid` for products that fill whole tiles, "
       "else their bounded twin, `sgm_w_mid` on `sgm_mid`; `sgm_big`, `sgm_wide`, `sgm_mid`, `sgm_small`) for "
       "every product that runs on the matrix units (for measuring); default: by the product's shape."),
    _s("SCELLIS_WGPU_LIMITS", "choice", "adapter", "device",
       "`default` opens the GPU with WebGPU's default limits, as a browser would.", choices=("adapter", "default")),
    _s("SCELLIS_WGPU_SUBGROUPS", "flag", True, "device",
       "Off: open the GPU without the `subgroup` feature, so kernels take their workgroup-memory paths."),
    _s("SCELLIS_WGPU_INT64", "flag", True, "device",
       "Off: open the GPU without `shader-int64`, so Philox draws (dropout, random) build each 32 x 32 -> 64-bit "
       "product from 16-bit halves instead of one 64-bit multiply."),
    _s("SCELLIS_WGPU_SHADER_CHECKS", "choice", "auto", "device",
       "`none` compiles kernels without naga's index clamps and loop counters (wgpu-native's trusted shader "
       "modules; storage buffers keep Vulkan's robust access); `bounds` / `loops` keep only the clamps / the "
       "counters; `naga` keeps both; `auto`: `none` for the tiled matmul and the score path's attention row kernels "
       "on a Vulkan adapter, `naga` for the rest.",
       choices=("auto", "naga", "bounds", "loops", "none")),
    _s("SCELLIS_WGPU_FLUSH_US", "float", None, "device",
       "How long a pass records before a program's end submits it (default 200).",
       lo=0, hi=1e6, unit="microseconds"),
    _s("SCELLIS_CHECK_INDICES", "flag", False, "device",
       "On: check gather / scatter indices on the host before each run (slower; for finding a bad index)."),
    # store and caches
    _s("SCELLIS_STORE", "text", None, "store",
       "Where runs, checkpoints and logs live (default: `.scellis/` in the current directory)."),
    _s("SCELLIS_CACHE_DIR", "text", None, "store",
       "Where per-machine caches live: device costs, matmul tuning (default `$XDG_CACHE_HOME/scellis`, "
       "else `~/.cache/scellis`)."),
    _s("SCELLIS_KEY_DIR", "text", None, "store",
       "The user's key store: the Ed25519 keys that sign receipt and privacy ledgers, and the pins (public key, "
       "chain head) that `scellis ledger verify` checks them against (default `$XDG_CONFIG_HOME/scellis/keys`, "
       "else `~/.config/scellis/keys`; folder 0700, files 0600; never inside a ledger's or store's folder)."),
    # compiled programs
    _s("SCELLIS_FUSION", "flag", True, "program",
       "Off: no elementwise fusion, no matmul epilogues, no folded transposes (one dispatch per op)."),
    _s("SCELLIS_FOLD_TRANSPOSE", "flag", True, "program",
       "Off: a swap of the last two axes is copied instead of folded into the matmul that reads it."),
    _s("SCELLIS_EPILOGUE", "flag", True, "program",
       "Off: bias, activation and residual after a matmul run as their own fused dispatch."),
    _s("SCELLIS_MULTI_TENSOR", "flag", True, "program",
       "Off: alike per-parameter updates run one dispatch each instead of one dispatch for all."),
    # kernels
    _s("SCELLIS_MATMUL_TUNE", "text", "auto", "kernels",
       "`auto` (autotune under tier fast on a GPU, else the tile table), `off` (the tile table), `on` (autotune "
       "per shape class, cached per adapter), or `VARIANT[:SPLITS]` (one forced tile)."),
    _s("SCELLIS_KSPLIT_FILL", "int", None, "kernels",
       "The workgroups the tile table's K-split aims for (default 512).", lo=1, unit="workgroups"),
    _s("SCELLIS_MATMUL_DB", "flag", True, "kernels", "Off: the tile table never takes the double-buffered tile."),
    _s("SCELLIS_ARENA_SPLIT", "flag", False, "kernels",
       "On: a wgpu Program's arena is planned as two buffers, each matmul's output apart from its operands, so "
       "they bind read-only (at most 10% or 16 MiB more arena bytes). Off by default: on an H100 it made the f32 GPT "
       "step 7% slower and left the mixed one unchanged (benchmarks/RESULTS.md, 2026-12-06 12:50)."),
    _s("SCELLIS_MATMUL_HUGE", "flag", True, "kernels",
       "Off: the tile table never takes the 128x256 tile (on: for read-only operands of an unchecked matmul, "
       "K >= 512)."),
    _s("SCELLIS_MATMUL_FOLD", "int", None, "kernels",
       "Products a packed-f16 partial sums before it is folded into f32 (tier fast; default one staged tile).",
       lo=1, unit="products"),
    _s("SCELLIS_MATMUL_VEC4", "flag", True, "kernels", "Off: matmul operands load as scalars only."),
    _s("SCELLIS_MATMUL_READONLY", "flag", True, "kernels",
       "Off: matmul operands always bind read_write (on: read-only where no written binding shares their buffer)."),
    _s("SCELLIS_MATMUL_VEC4_F16", "flag", True, "kernels", "Off: f16 matmul operands load as scalars."),
    _s("SCELLIS_MATMUL_VEC4_AROWS", "flag", None, "kernels",
       "A row-major A loads 4 k at once too (default: for f16 only)."),
    _s("SCELLIS_SUBROW_MAX", "int", None, "kernels",
       "The longest reduced row a subgroup takes (default 1024).", lo=0, unit="elements"),
    _s("SCELLIS_ROW_REG", "flag", False, "kernels", "On: softmax and norms read a row once, into registers."),
    _s("SCELLIS_WGPU_VEC4", "flag", True, "kernels", "Off: contiguous elementwise ops run on the strided kernel."),
    _s("SCELLIS_WGPU_ROWS", "flag", True, "kernels", "Off: row copies run on the strided kernel."),
    _s("SCELLIS_ATTENTION_PATH", "choice", "auto", "kernels",
       "`flash` (the flash kernels) or `scores` (materialized scores; also runs a head too long for one chunk "
       "in blocks of query rows).", choices=("auto", "flash", "scores")),
    _s("SCELLIS_ATTENTION_KERNEL", "choice", "auto", "kernels",
       "`rowwise`: the one-row-per-thread flash kernels instead of the register-tiled ones; `sgm`: the flash "
       "kernels on the matrix units (kernels/flash_sgm.wgsl) wherever they can run (subgroup matrices, head sizes "
       "in whole fragments, no mask, no dropout; else as `auto`). Opt-in until checked on a GPU with matrix units.",
       choices=("auto", "rowwise", "sgm")),
    _s("SCELLIS_ATTENTION_TILE_FWD", "text", None, "kernels", "The forward flash tile, `TYxCK` (e.g. `8x2`)."),
    _s("SCELLIS_ATTENTION_TILE_DQ", "text", None, "kernels", "The dQ flash tile, `TYxCK`."),
    _s("SCELLIS_ATTENTION_TILE_DKDV", "text", None, "kernels", "The dK/dV flash tile, `TYxCK`."),
    _s("SCELLIS_ATTENTION_SCORES_MB", "int", None, "kernels",
       "The scores path's chunk budget in MiB (0 or unset: a share of the device's memory).", lo=0, unit="MiB"),
    _s("SCELLIS_ATTENTION_FUSE", "flag", True, "kernels",
       "Off: the scores backward runs its row kernels instead of matmul epilogues."),
    _s("SCELLIS_ATTENTION_SPLIT", "flag", True, "kernels", "Off: one-head attention products run unsplit."),
    # pools
    _s("SCELLIS_PEER_MAX_BYTES", "int", 2 << 30, "pool",
       "The most bytes one data shard may make a peer allocate.", lo=1, unit="bytes"),
    # examples, build and tests
    _s("SCELLIS_EXAMPLE_STEPS", "int", None, "examples",
       "Cut the example notebooks' and scripts' training to this many steps (CI runs them short).",
       lo=1, unit="steps"),
    _s("SCELLIS_TEST_SPEC", "text", None, "examples", "The spec file a test-suite fixture trains (tests only)."),
    _s("SCELLIS_CHROMIUM", "text", None, "examples", "The Chromium binary the browser tests drive (tests only)."),
)}


def _setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not a declared setting (settings.SETTINGS)") from None


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def refuse(name: str, value: str, expected: str, hint: str = "") -> SettingError:
    """The one refusal of a bad value: names the variable, the value, and what it takes."""
    s = SETTINGS.get(name)
    return SettingError(f"{name}={value!r} is not {expected}", where="environment",
                        hint=hint or (f"{s.doc} Unset it for the default." if s else "unset it"))


def flag(name: str, default: bool | None = None) -> bool:
    """An on/off setting: 1 / on / true / yes, or 0 / off / false / no (any case); unset or empty: the
    declared default (or `default`, for a setting whose default the caller decides)."""
    s = _setting(name)
    raw = _raw(name)
    v = raw.lower()
    if not v:
        d = s.default if default is None else default
        return bool(d)
    if v in ON:
        return True
    if v in OFF:
        return False
    raise refuse(name, raw, "on or off", hint=f"use one of {', '.join(ON + OFF)}, or unset it")


def number(name: str, default: float | None = None) -> int | float | None:
    """An int or float setting within its declared bounds; unset or empty: the declared default (or
    `default`). An int setting takes `2e9`-style values that are whole numbers."""
    s = _setting(name)
    v = _raw(name)
    if not v:
        return s.default if default is None else default
    what = f"a {'whole ' if s.kind == 'int' else ''}number{' of ' + s.unit if s.unit else ''}"
    t = v.replace("_", "")
    try:
        x = int(t)                 # exact, however large (a float holds whole numbers exactly only to 2^53)
    except ValueError:
        try:
            x = float(t)
        except ValueError:
            raise refuse(name, v, what) from None
    if isinstance(x, float) and (not math.isfinite(x) or (s.kind == "int" and not x.is_integer())):
        raise refuse(name, v, what)
    if (s.lo is not None and x < s.lo) or (s.hi is not None and x > s.hi):
        lo = "" if s.lo is None else f"{s.lo:g}"
        hi = "" if s.hi is None else f"{s.hi:g}"
        rng = f"at least {lo}" if not hi else f"at most {hi}" if not lo else f"within {lo}..{hi}"
        raise refuse(name, v, f"{what} {rng}")
    return int(x) if s.kind == "int" else float(x)


def choice(name: str) -> str:
    """One of the setting's declared choices (any case); unset or empty: its default."""
    s = _setting(name)
    raw = _raw(name)
    v = raw.lower()
    if not v:
        return s.default
    if v not in s.choices:
        close = did_you_mean(v, s.choices)
        raise refuse(name, raw, f"one of {', '.join(s.choices)}", hint=close or f"{s.doc} Unset it for the default.")
    return v


def text(name: str) -> str | None:
    """A free-text setting (a path, a device name); unset or empty: its default."""
    s = _setting(name)
    return _raw(name) or s.default


def cache_dir() -> Path:
    """Where per-machine caches live: $SCELLIS_CACHE_DIR, else $XDG_CACHE_HOME/scellis, else ~/.cache/scellis."""
    d = text("SCELLIS_CACHE_DIR")
    if d:
        return Path(d).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scellis"


def key_dir() -> Path:
    """The user's key store: $SCELLIS_KEY_DIR, else $XDG_CONFIG_HOME/scellis/keys, else ~/.config/scellis/keys."""
    d = text("SCELLIS_KEY_DIR")
    if d:
        return Path(d).expanduser()
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "scellis" / "keys"


def unknown(environ=None) -> list[str]:
    """SCELLIS_* variables set in the environment that are no setting: "NAME (did you mean ...)" each."""
    env = os.environ if environ is None else environ
    out = []
    short = {k[len(PREFIX):]: k for k in SETTINGS}
    for k in sorted(env):
        if k.startswith(PREFIX) and k not in SETTINGS:
            # matched without the shared prefix, which would make every name look close
            close = [short[c] for c in difflib.get_close_matches(k[len(PREFIX):], short, n=2, cutoff=0.75)]
            out.append(f"{k} (did you mean {' or '.join(close)}?)" if close else k)
    return out


def in_effect(environ=None) -> dict[str, str]:
    """The declared settings set (non-empty) in the environment, by name: for `scellis device` and bug reports."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(SETTINGS) if env.get(k, "").strip()}


def report() -> list[str]:
    """What `scellis device` and `%scellis device` show under "settings": each set one, then each unknown name."""
    return ([f"  {k} = {v}" for k, v in in_effect().items()]
            + [f"  {k}: not a setting scellis reads" for k in unknown()])


def describe_default(s: Setting) -> str:
    """The default as the docs show it: on / off, the value, or "default" where the reader decides."""
    if s.default is None:
        return "default"
    return ("on" if s.default else "off") if isinstance(s.default, bool) else str(s.default)


def render() -> str:
    """docs/settings.md: every setting by group, with its kind, default and meaning."""
    lines = ["# Environment settings", "",
             "Generated from `scellis_jupyter/settings.py` (`scellis settings --markdown > docs/settings.md`);",
             "`scellis settings` lists them with their values here. A bad value is refused with",
             "`error[setting] at environment`; an unknown `SCELLIS_*` name is reported, with the closest",
             "setting, when a device is first chosen and by `scellis device`. On/off settings take",
             "1 / on / true / yes and 0 / off / false / no; unset or empty means the default.", ""]
    for g, title in GROUPS.items():
        rows = [s for s in SETTINGS.values() if s.group == g]
        lines += [f"## {title}", "", "| setting | takes | default | what it does |", "|---|---|---|---|"]
        for s in rows:
            takes = {"flag": "on / off", "choice": " / ".join(s.choices)}.get(s.kind, s.kind)
            if s.kind in ("int", "float") and s.unit:
                takes = f"{s.kind}, {s.unit}"
            default = "-" if s.default is None else describe_default(s)
            lines.append(f"| `{s.name}` | {takes} | {default} | {s.doc} |")
        lines.append("")
    return "\n".join(lines)


