"""Matmul on the matrix units through Dawn's subgroup matrices: the configuration, the tiles, the kernel source.

Why a separate kernel and the same launcher: the tensor cores (NVIDIA), simdgroup matrices (Apple) and XMX
(Intel) multiply small fragments a whole subgroup holds together, so the kernel's inner loop is fragment loads
and multiply-accumulates instead of the SIMT kernel's per-thread FMAs; everything around it (chunking to the
binding limit, batches, transposed operands, K-split partials, causal bands, epilogues) is the plain matmul's,
and kernels/matmul.py launches either through one path.

Where it runs: an f16 (or f32, where the adapter lists an f32 configuration) product under the tiers `prod` and
`fast`, on a device with `chromium-experimental-subgroup-matrix` and subgroups whose size is fixed (min = max
in the configuration). Never under `debug`: the matrix units sum a fragment's k in an order of their own, so
the bits differ from the reference path's (which debug promises to match); their results are within the
tolerance of f32 accumulation. Tile shapes come from the configuration the adapter reports (16x16x16 on NVIDIA,
8x8x8 on Apple), never from a vendor name; which tile a shape takes is a rule (choose_tile), or where the matmul
tuner runs, the fastest fitting tile timed once per shape class (matmul._sgm_tile). Attention's score path runs
its f16 products here too (attention_scores.py `half`: f16 operands into f32 scores and gradients).

SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE=`T:MxNxK[:S]` (T f16 or f32, S the emulated subgroup size, default 32)
makes every device run the kernels with plain WGSL standing in for the builtins (kernels/matmul_sgm.wgsl EMU),
so their tiling, indexing and edge handling are tested on adapters without matrix units (CI's llvmpipe and
SwiftShader), against the numpy reference.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .... import settings
from ....errors import SettingError
from ..templates import WGSL_TYPE, render, snippet


@dataclass(frozen=True)
class Config:
    """One subgroup-matrix configuration: operand type, result fragment M8 x N8, depth K8, subgroup size."""

    component: str      # "f16" or "f32"
    m: int
    n: int
    k: int
    sgs: int            # invocations a subgroup (fixed)
    emulated: bool = False


# (FM, FN, KF, WM, WN): FM x FN fragments a subgroup, KF fragments of k a step, WM x WN subgroups; the tile is
# TM = WM * FM * M8 by TN = WN * FN * N8. WHOLE tiles come first: the rule takes one where the chunk fits it.
TILES = {
    "sgm_w_big": (4, 4, 1, 2, 2),    # whole: 2x2 subgroups of 4x4 fragments (128x128 for 16x16x16), two buffers
    "sgm_w_wide": (2, 4, 1, 2, 2),   # whole: 2x4 fragments a subgroup (64x128)
    "sgm_w_mid": (2, 2, 1, 2, 2),    # whole: 2x2 fragments a subgroup (64x64)
    "sgm_big": (4, 4, 2, 2, 2),      # 2x2 subgroups of 4x4 fragments (128x128 for 16x16x16), BK 2 fragments
    "sgm_wide": (2, 4, 2, 2, 2),     # 2x4 fragments a subgroup (64x128)
    "sgm_mid": (2, 2, 2, 2, 2),      # 2x2 fragments a subgroup (64x64)
    "sgm_small": (2, 2, 2, 1, 1),    # one subgroup of 2x2 fragments (32x32)
}
# Tiles for chunks that fill whole tiles: no bounds on any load, vec4 loads of every orientation, two staging
# buffers (one barrier a step). On the H100 such a kernel ran 4096^3 f16 at 138-166 TFLOP/s against 25-49 for
# the bounded single-buffer one (benchmarks/RESULTS.md, 2026-12-07 evening).
WHOLE = frozenset({"sgm_w_big", "sgm_w_wide", "sgm_w_mid"})
PAD_BYTES = 16          # each staged row padded by 16 bytes: fragment loads stay 16-byte aligned, rows spread over banks


def emulated() -> Config | None:
    """The configuration SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE names (None: unset)."""
    text = settings.text("SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE")
    if not text:
        return None
    try:
        parts = text.split(":")
        comp, dims = parts[0], parts[1]
        m, n, k = (int(x) for x in dims.lower().split("x"))
        sgs = int(parts[2]) if len(parts) > 2 else 32
        ok = comp in ("f16", "f32") and min(m, n, k, sgs) > 0 and m % 4 == 0 and n % 4 == 0 and k % 4 == 0
    except (ValueError, IndexError):
        ok = False
    if not ok:
        raise SettingError(f"SCELLIS_WGPU_SUBGROUP_MATRIX_EMULATE={text!r} is not T:MxNxK[:S]",
                           where="environment", hint="e.g. f32:8x8x8 or f16:16x16x16:32 (M, N, K multiples of 4)")
    return Config(comp, m, n, k, sgs, True)


def configs(be) -> list[Config]:
    """The configurations this backend can run subgroup-matrix kernels with, best first: the emulated one
    when asked for, else the adapter's with an f32 result and a fixed subgroup size (empty without the feature)."""
    emu = emulated()
    if emu is not None:
        return [emu]
    if "subgroup-matrix" not in getattr(be, "features", ()) or "subgroup" not in be.features:
        return []
    out = []
    for c in getattr(be, "sgm_configs", []):
        comp, res = c.get("component_type"), c.get("result_component_type")
        lo, hi = c.get("min_subgroup_size", 0), c.get("max_subgroup_size", 0)
        if comp in ("f16", "f32") and res == "f32" and lo == hi and lo > 0 and all(c.get(x, 0) % 4 == 0 for x in "mnk"):
            out.append(Config(comp, int(c["m"]), int(c["n"]), int(c["k"]), int(hi)))
    return sorted(out, key=lambda c: -(c.m * c.n * c.k))


def config_for(be, dtype: str, tier) -> Config | None:
    """The configuration an `dtype` product runs on the matrix units with under `tier`, or None (the SIMT kernels):
    not under debug (their k order is not the reference's), not for a component type other than the operands'."""
    if tier == "debug" or tier is None or dtype not in ("f16", "f32"):
        return None
    if dtype == "f16" and not getattr(be, "has_f16", False):
        return None
    return next((c for c in configs(be) if c.component == dtype), None)


def tile(cfg: Config, name: str) -> tuple[int, int, int, int, int, int, int]:
    """(TM, TN, BK, WM, WN, FM, FN) of tile `name` under `cfg`, in elements and fragments."""
    fm, fn, kf, wm, wn = TILES[name]
    return wm * fm * cfg.m, wn * fn * cfg.n, kf * cfg.k, wm, wn, fm, fn


def strides(cfg: Config, name: str, ta: bool, tb: bool) -> tuple[int, int, int, int]:
    """(A row stride, A rows, B row stride, B rows) of the staged tiles in their stored orientation, padded."""
    tm, tn, bk = tile(cfg, name)[:3]
    pad = PAD_BYTES // (2 if cfg.component == "f16" else 4)
    a = (tm + pad, bk) if ta else (bk + pad, tm)
    b = (bk + pad, tn) if tb else (tn + pad, bk)
    return a[0], a[1], b[0], b[1]


def staging_bytes(cfg: Config, name: str, ta: bool = False, tb: bool = False) -> int:
    """Workgroup memory of tile `name`'s staged A and B tiles (two of each for a whole tile)."""
    astr, arows, bstr, brows = strides(cfg, name, ta, tb)
    isz = 2 if cfg.component == "f16" else 4
    return (astr * arows + bstr * brows) * isz * (2 if name in WHOLE else 1)


def cs_frags(cfg: Config, name: str, limit: int) -> int:
    """How many of a fragment row's FN fragments each subgroup stores through Cs at once: the most (a divisor
    of FN) whose strips fit `limit` bytes of workgroup memory beside the staging of any orientation; 0: none."""
    fn = tile(cfg, name)[6]
    orients = [(ta, tb) for ta in (False, True) for tb in (False, True)]
    for c in range(fn, 0, -1):
        if fn % c == 0 and max(smem_bytes(cfg, name, ta, tb, c) for ta, tb in orients) <= limit:
            return c
    return 0


def smem_limit(be) -> int:
    return int(getattr(be, "limits", {}).get("max-compute-workgroup-storage-size", 16384))


def smem_bytes(cfg: Config, name: str, ta: bool = False, tb: bool = False, csf: int = 1) -> int:
    """Workgroup memory of tile `name`: the staging and `csf` f32 result fragments a subgroup (Cs)."""
    wm, wn = tile(cfg, name)[3:5]
    return staging_bytes(cfg, name, ta, tb) + wm * wn * cfg.m * csf * cfg.n * 4


def fits(cfg: Config, name: str, be) -> bool:
    """Whether tile `name` runs on `be`: its workgroup memory (with at least one result fragment a subgroup in
    Cs) and invocations within the device's limits, and every thread a whole number of 4-element staging slots."""
    tm, tn, bk, wm, wn = tile(cfg, name)[:5]
    threads = wm * wn * cfg.sgs
    lim = getattr(be, "limits", {})
    return (cs_frags(cfg, name, smem_limit(be)) > 0
            and threads <= int(lim.get("max-compute-invocations-per-workgroup", 256))
            and threads <= int(lim.get("max-compute-workgroup-size-x", 256))
            and (tm * bk) % (4 * threads) == 0 and (tn * bk) % (4 * threads) == 0)


def whole_fits(cfg: Config, name: str, m: int, n: int, k: int, kc: int, band: int, offs, strides3, lds,
               band_off: int = 0) -> bool:
    """Whether the whole tile `name` can run an m x n x k chunk: every workgroup's rows, columns and k steps
    inside the operands (m, n multiples of the tile; k, and a K-split's k per split, multiples of BK; a causal
    band's offset too, so the k range a band leaves a tile starts and ends on whole steps), and every row 16-byte
    aligned (element offsets, batch strides and leading dimensions multiples of 16 bytes), so every load is one
    unchecked vec4."""
    if name not in WHOLE:
        return False
    tm, tn, bk = tile(cfg, name)[:3]
    per16 = 16 // (2 if cfg.component == "f16" else 4)
    return ((band == 0 or band_off % bk == 0) and m % tm == 0 and n % tn == 0 and k % bk == 0 and kc % bk == 0
            and k > 0
            and all(x % per16 == 0 for x in (*offs[:2], *strides3[0], *strides3[1], *lds)))


def candidates(cfg: Config, be, whole=lambda name: False) -> list[str]:
    """The tiles that fit `be` for a chunk, in TILES order (whole tiles first): a whole tile only where
    `whole(name)` says the chunk fits it."""
    return [t for t in TILES if fits(cfg, t, be) and (t not in WHOLE or whole(t))]


def choose_tile(cfg: Config, be, m: int, n: int, whole=lambda name: False) -> str | None:
    """The tile for an m x n product: the largest that still gives the GPU some 2 x 66 workgroups to spread (a
    132-SM H100; smaller GPUs fill sooner), whole tiles first where `whole(name)` says the chunk fits one, else
    the smallest bounded tile that fits; None when none fits the device. SCELLIS_MATMUL_SGM_TILE forces one (for
    measuring; a forced whole tile where the chunk does not fit it runs on its bounded twin: sgm_w_mid on sgm_mid)."""
    forced = settings.text("SCELLIS_MATMUL_SGM_TILE")
    names = candidates(cfg, be, whole)
    if forced:
        if forced not in TILES:
            raise SettingError(f"SCELLIS_MATMUL_SGM_TILE={forced!r} is not a subgroup-matrix tile",
                               where="environment", hint=f"one of {', '.join(TILES)}")
        if forced in WHOLE and forced not in names:
            forced = forced.replace("sgm_w_", "sgm_")
        return forced if forced in names else None
    for name in names:
        tm, tn = tile(cfg, name)[:2]
        if -(-m // tm) * -(-n // tn) >= 132:
            return name
    return names[-1] if names else None


def groups(cfg: Config, name: str, m: int, n: int) -> tuple[int, int]:
    tm, tn = tile(cfg, name)[:2]
    return -(-n // tn), -(-m // tm)


def key(cfg: Config, name: str, csf: int = 0) -> str:
    """The part of a pipeline key that names the configuration, tile and Cs strip (csf fragments)."""
    return (f"{name}@{cfg.component}{cfg.m}x{cfg.n}x{cfg.k}s{cfg.sgs}" + ("emu" if cfg.emulated else "")
            + (f"c{csf}" if csf else ""))


@functools.lru_cache(maxsize=None)
def source(cfg: Config, name: str, dtype: str, epi_parts: tuple[str, str, str], band: str, ta: bool, tb: bool,
           va: bool, vb: bool, ro: tuple, c_dtype: str | None, csf: int = 1) -> str:
    """WGSL of tile `name` under `cfg` for `dtype` operands. `epi_parts`: (EPILOGUE, EPI_PARAMS, ENABLE) of an
    epilogue (matmul._epi_parts; its store is then `epilogue()`), `band`: the causal band's statements, `va` /
    `vb`: A / B bound as vec4s (matmul._vec4), `ro`: A / B read-only, `c_dtype`: C's type where it is not the
    operands' (f32 K-split partials), `csf`: result fragments a subgroup stores through Cs at once (cs_frags)."""
    tm, tn, bk, wm, wn, fm, fn = tile(cfg, name)
    nsg = wm * wn
    threads = nsg * cfg.sgs
    t = WGSL_TYPE[dtype]
    ct = WGSL_TYPE[c_dtype or dtype]
    epi_text, epi_params, enable = epi_parts
    astr, arows, bstr, brows = strides(cfg, name, ta, tb)
    sn_ = functools.partial(snippet, "matmul_sgm")
    emu = cfg.emulated
    mode = "emu" if emu else "real"
    whole = name in WHOLE
    if whole:
        va = vb = True          # every slot one vec4 load (the launcher binds A and B so)
    a_slots, b_slots = tm * bk // 4 // threads, tn * bk // 4 // threads
    alen, blen = astr * arows, bstr * brows

    decl = [sn_("acc", I=i, J=j, RESULT=sn_(f"{mode}_result", M8=cfg.m, N8=cfg.n)) for i in range(fm)
            for j in range(fn)]
    decl += [sn_("stage", J=j, T=t) for j in range(a_slots + b_slots)]
    pre = "w" if whole else ""
    fetch = [sn_(pre + ("fetch_a_t" if ta else "fetch_a"), flags={"VA": va}, J=j, E0=j * threads, BK=bk, TM=tm, T=t)
             for j in range(a_slots)]
    fetch += [sn_(pre + ("fetch_b_t" if tb else "fetch_b"), flags={"VB": vb}, J=a_slots + j, E0=j * threads, BK=bk,
                  TN=tn, T=t) for j in range(b_slots)]

    def put(buf: int) -> str:
        out = [sn_("put", J=j, E0=j * threads, W=tm if ta else bk, STR=astr, S="As", BASE=buf * alen)
               for j in range(a_slots)]
        out += [sn_("put", J=a_slots + j, E0=j * threads, W=bk if tb else tn, STR=bstr, S="Bs", BASE=buf * blen)
                for j in range(b_slots)]
        return "\n".join(out)

    def compute(buf: int) -> str:
        out = []
        for kk in range(0, bk, cfg.k):
            lines = []
            for i in range(fm):
                off = (f"{buf * alen + kk * astr}u + fm0 + {i * cfg.m}u" if ta
                       else f"{buf * alen + kk}u + (fm0 + {i * cfg.m}u) * {astr}u")
                lines.append(sn_("load_a", I=i, LOAD_A=sn_(f"{mode}_load_a", T=t, K8=cfg.k, M8=cfg.m, OFF=off,
                                                           COL="true" if ta else "false", STR=astr)))
            for j in range(fn):
                off = (f"{buf * blen + kk}u + (fn0 + {j * cfg.n}u) * {bstr}u" if tb
                       else f"{buf * blen + kk * bstr}u + fn0 + {j * cfg.n}u")
                lines.append(sn_("load_b", J=j, LOAD_B=sn_(f"{mode}_load_b", T=t, N8=cfg.n, K8=cfg.k, OFF=off,
                                                           COL="true" if tb else "false", STR=bstr)))
            lines += [sn_("mma", I=i, J=j, MMA=sn_(f"{mode}_mma", I=i, J=j)) for i in range(fm) for j in range(fn)]
            out.append("{\n" + "\n".join(lines) + "\n}")
        return "\n".join(out)

    mn8 = cfg.m * cfg.n
    one = sn_("store_one_epi") if epi_text else sn_("store_one", CBT=ct)
    sw = csf * cfg.n                    # a subgroup's strip in Cs: M8 rows of csf fragments
    msn = cfg.m * sw
    store = [sn_("store_row", I=i, M8=cfg.m, MSN=msn, WN=wn, SM=fm * cfg.m, SN=fn * cfg.n, SW=sw, COL0=j0 * cfg.n,
                 CS_LEN=nsg * msn, THREADS=threads, STORE_ONE=one,
                 STORE_CS="\n".join(sn_(f"{mode}_store_cs", I=i, J=j, JJ=j - j0, MSN=msn, N8=cfg.n, SW=sw,
                                         SGS=cfg.sgs) for j in range(j0, j0 + csf)))
             for i in range(fm) for j0 in range(0, fn, csf)]

    if emu:
        head = enable
        emulation = sn_("emulation", T=t, M8=cfg.m, N8=cfg.n, K8=cfg.k, MK8=cfg.m * cfg.k, KN8=cfg.k * cfg.n,
                        MN8=mn8)
        sgid_param, sgid = "", sn_("emu_sgid", SGS=cfg.sgs)
    else:
        head = "\n".join(x for x in (enable, "enable chromium_experimental_subgroup_matrix;") if x)
        emulation = ""
        sgid_param, sgid = sn_("real_sgid_param"), ""
    nbuf = 2 if whole else 1
    steps = {f"STEP{i}": sn_("whole_step", I=i, BK=bk, FETCH="\n".join(fetch), COMPUTE=compute(i - 1), PUT=put(i % 2))
             if whole else "" for i in (1, 2)}
    return render("matmul_sgm", flags={"VA": va, "VB": vb, "WHOLE": whole}, ENABLE=head, T=t, CBT=ct,
                  AACC="read" if ro[0] else "read_write", BACC="read" if ro[1] else "read_write",
                  TM=tm, TN=tn, BK=bk, NSG=nsg, WM=wm, WN=wn, FM=fm, FN=fn, M8=cfg.m, N8=cfg.n,
                  SM=fm * cfg.m, SN=fn * cfg.n, THREADS=threads, AS_LEN=nbuf * alen, BS_LEN=nbuf * blen,
                  CS_LEN=nsg * msn, EPI_PARAMS=epi_params, EPILOGUE=epi_text, EMULATION=emulation,
                  SGID_PARAM=sgid_param, SGID=sgid, BAND=band, DECL="\n".join(decl), FETCH="\n".join(fetch),
                  PUT0=put(0), COMPUTE0=compute(0), STORE="\n".join(store), **steps)
