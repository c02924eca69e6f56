"""Which matmul tile (and K-split) to run for a shape class on an adapter: a fixed table, or measured.

Why: one tile shape for every size leaves most of a large GPU idle on smaller problems (2048^3 ran at a
sixth of the 8192^3 rate on an H200 with the 128x128 tile alone). Tile variants do not change the
summation order of an output element (each thread adds k in increasing order), so any of them may run
under any tier; a K-split does change it (partials summed in a fixed split order: deterministic run to
run, but not the unsplit order). So under the `debug` tier the only split that runs is the one the
fixed shape rule in `default_config` picks (few output tiles, long K: a weight gradient over many rows),
a function of the shape alone with boundaries that do not depend on the tile variant, so reruns on one
device stay bit-identical; measurement (the tuner) and forced configs never change the split under debug.

SCELLIS_MATMUL_TUNE selects the policy:
  auto (default) `on` for programs of tier fast on a GPU adapter, `off` otherwise. Tier fast promises results
                 within tolerance only, so a measured choice (whose packed-f16 fold interval, and split, may
                 differ from the table's) is within its contract. On an H100 the mixed-f16 GPT loop ran at
                 50.9-51.9 ms a step autotuned against 57.6 on the table (one process; 55.6 against 56.7 in
                 another), after a first tune of about 40 s (RESULTS.md, 2026-12-06, 08:2x). Not on a CPU
                 adapter (llvmpipe): timing the candidates there takes longer than it saves
  off            the deterministic table (`default_config`): what tests and CI run
  on             read the on-disk cache; on a miss time a few candidates once and store the winner
  CONFIG         force one config everywhere, e.g. `mid` or `big:4` (variant[:splits]); for tests
                 (under debug the split stays the shape rule's)
The cache is a JSON file per adapter id under $SCELLIS_CACHE_DIR (default ~/.cache/scellis)/matmul-tune/.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

from .... import settings
from ....errors import notice
from .matmul_sgm import TILES as SGM_TILES

# name: (TM, TN, RM, RN, BK, FLAGS). FLAGS: "pf" loads the next k-tile into registers during the current
# one's products (global latency hidden behind the FMAs); "fma" writes each update as an explicit fma()
# (one rounding; naga's SPIR-V otherwise carries a multiply and an add the driver may or may not fuse);
# "pad" pads As rows by a vec4 (bank-conflict-free k-major stores) when that fits 16 KiB; "wt" maps each warp's 32
# threads to 8 x 4 thread tiles (matmul.wgsl WT). None of them changes the order in which an output element sums
# over k.
VARIANTS = {
    "big": (128, 128, 8, 8, 8, ()),      # 256 threads, 16 vec4 accumulators each
    "big16": (128, 128, 8, 8, 16, ()),   # same tile, deeper k step (16 KiB of workgroup memory)
    "tall": (128, 64, 8, 4, 16, ()),     # 256 threads, 8 accumulators: twice the workgroups of `big`
    "wide": (64, 128, 4, 8, 16, ()),
    "mid": (64, 64, 4, 4, 16, ()),       # 256 threads, 4 vec4 accumulators each
    "small": (32, 32, 4, 4, 16, ()),     # 64 threads
    "big_f": (128, 128, 8, 8, 8, ("fma",)),
    "big_p": (128, 128, 8, 8, 8, ("pf", "pad")),
    "big_pf": (128, 128, 8, 8, 8, ("pf", "pad", "fma")),
    "big16_pf": (128, 128, 8, 8, 16, ("pf", "pad", "fma")),
    "tall_pf": (128, 64, 8, 4, 16, ("pf", "pad", "fma")),
    "wide_pf": (64, 128, 4, 8, 16, ("pf", "pad", "fma")),
    "mid_pf": (64, 64, 4, 4, 16, ("pf", "pad", "fma")),
    "huge_pf": (128, 256, 8, 16, 8, ("pf", "pad", "fma")),   # 8x16 per thread, 32 vec4 accumulators
    # "db": two workgroup-memory buffers, one barrier a k-tile instead of two (matmul.wgsl loop_db); needs
    # twice the workgroup memory (16.3 KiB: over WebGPU's default 16 KiB, within llvmpipe's and the H200's).
    # big_p's products in big_p's order: the same bits. (tall and huge double-buffered ran no faster than
    # tall_pf / huge_pf on the H200, 2026-12-04, and were dropped.)
    "big_db": (128, 128, 8, 8, 8, ("pf", "pad", "db")),
    # 8x16 per thread over a 128x256 tile, double-buffered: half again the FMAs per workgroup-memory read of big_db.
    # On an H100 (2026-12-06), with A and B read-only and the kernel unchecked, 8192^3 ran at 41.6-42.1 TFLOP/s
    # and 4096^3 at 40.2-40.8 against big_db's 38.9-39.1 / 37.7; checked by naga it ran no faster than big_db
    # (39.7 / 38.5). The table takes it only so (`default_config` huge). Warp-tiled ("wt": a warp's 32 threads
    # take 8 x 4 thread tiles, not 16 x 2): 43.1 against 42.4 at 8192^3, 39.0-39.5 against 38.7-38.8 at 2048^3
    "huge_db": (128, 256, 8, 16, 8, ("pf", "pad", "db", "wt")),
}
# the table's huge_db needs this many 128x256 tiles (one a multiprocessor: the tile holds one workgroup per SM on an
# H100, whose 132 SMs 2048^3's 128 tiles nearly fill)
HUGE_TILES = 128
# and a K of at least this: on an H100 (RESULTS.md 2026-12-06 15:00) huge_db ran K = 64 / 128 / 256 products of 4096 x
# 4096 at 20.6 / 28.3 / 34.0 TFLOP/s against big_db's 22.6 / 30.9 / 34.3, and passed it from K = 512 (36.7 against
# 35.9; 42.6 against 40.3 at 4096^3): attention's score products (K = the head size) lost 11% of fwd+bwd to it
HUGE_MIN_K = 512


PAD_LIMIT = 16384   # workgroup bytes a single-buffered tile pads within (WebGPU's default limit); twice that for "db"


def tile_strides(variant: str, packed: bool = False, tb: bool = False) -> tuple[int, int, int]:
    """(A row stride, B row stride in vec4s, buffers) of a variant's workgroup tiles: "pad" adds a vec4 to
    each k-row of As (and of a transposed B's Bs) where that still fits PAD_LIMIT per buffer, so the k-major
    stores of a warp's threads fall in different banks. matmul.source() lays its tiles out by this."""
    tm, tn, _rm, _rn, bk, flags = VARIANTS[variant]
    nbuf = 2 if "db" in flags else 1
    vb, lim = (8 if packed else 16), PAD_LIMIT * nbuf
    astr = tm // 4 + (1 if "pad" in flags and nbuf * (bk * (tm // 4 + 1) + bk * tn // 4) * vb <= lim else 0)
    bstr = tn // 4 + (1 if tb and "pad" in flags and nbuf * (bk * astr + bk * (tn // 4 + 1)) * vb <= lim else 0)
    return astr, bstr, nbuf


def smem_bytes(variant: str, packed: bool = False) -> int:
    """Workgroup-memory bytes of a tile variant, the larger of its two layouts (a transposed B may be
    padded too): what the adapter's max-compute-workgroup-storage-size must allow."""
    bk = VARIANTS[variant][4]
    return max(nbuf * bk * (astr + bstr) * (8 if packed else 16)
               for astr, bstr, nbuf in (tile_strides(variant, packed, tb) for tb in (False, True)))


SPLITS = (1, 2, 4, 8, 16, 32)
# the shape rule's K-split: when a whole f32 or f16 matrix has fewer than FEW_TILES output tiles and K of at least
# LONG_K, split K until about FILL_WORKGROUPS workgroups run (a 132-SM GPU otherwise idles), each split
# keeping at least MIN_SPLIT_K of K
# (512: four workgroups an SM. On the H200, 2026-12-04, the GPT step's weight gradients of K = 16384 ran at
# 26.7-27.9 TFLOP/s split 16 ways (big_p / tall_pf tiles) against 12-18 split 4 ways, and the step went from
# 72.7 to 63.6 ms.) A matrix of at least BIG_SPLIT_TILES 128x128 tiles takes the big tile when it splits: 384 x
# 1152 ran at 26.2 as big_p split 8 ways against 14.9 as 108 unsplit 64x64 tiles.
FEW_TILES, LONG_K, FILL_WORKGROUPS, MIN_SPLIT_K, BIG_SPLIT_TILES = 64, 2048, 512, 1024, 16
# f16 operands split too: their partials are f32 (each split sums in f32, or in packed f16 folded into f32
# under fast), summed in f32 and rounded once. Mixed-precision GPT weight gradients (K = 16384) ran unsplit
# at 2.7x the time of the split f32 ones (H100 profile, 2026-12-05).
SPLIT_DTYPES = ("f32", "f16")


def fill_workgroups() -> int:
    """SCELLIS_KSPLIT_FILL: the workgroups the shape rule's K-split aims for (default FILL_WORKGROUPS);
    for measuring the rule on an adapter."""
    return settings.number("SCELLIS_KSPLIT_FILL", FILL_WORKGROUPS)


DEFAULT_BINDING = 1 << 27


def db_enabled() -> bool:
    """Whether the table may take the double-buffered big tile (SCELLIS_MATMUL_DB=off: never; to compare)."""
    return settings.flag("SCELLIS_MATMUL_DB")


# Under packed f16 math (tier fast) the table takes each tile without register prefetch or double buffering:
# its f16 partial accumulators beside the f32 ones leave no registers for a prefetched tile. On an H100
# (2026-12-05) the tuner picked the plain tiles (big, mid, tall) for the mixed-f16 GPT step's heavy shapes, and
# the step ran at 69 ms autotuned against 91 ms on the prefetching table.
PACKED_PLAIN = {"big_db": "big", "big_p": "big", "mid_pf": "mid"}


def default_config(m: int, n: int, batch: int, k: int = 0, dtype: str = "f32", whole: bool = True,
                   binding_limit: int = DEFAULT_BINDING, smem: int = 16384, packed: bool = False,
                   huge: bool = False) -> tuple[str, int]:
    """The big tile when there are enough 128x128 tiles to fill a large GPU; smaller ones otherwise; and a
    K-split for a whole f32 or f16 matrix of few output tiles and long K (a fixed rule of the shape alone:
    M = N = 384, K = 16384 gives 36 64x64 tiles, split 16 ways). k = 0: tile only. The big tile is
    big_db (double-buffered, the same bits as big_p) where the adapter's workgroup memory `smem` holds it:
    on the H200 (2026-12-04) it ran the GPT step's matmuls at 27.8-31.4 TFLOP/s against big_p's 27.2-29.9.
    `packed`: the packed-f16 path runs (`packed_f16`), which takes the plain tiles (PACKED_PLAIN). `huge`: the
    operands bind read-only and the kernel compiles unchecked (`huge_ok`), where huge_db outruns big_db: it is
    taken for at least HUGE_TILES of its tiles, a K of at least HUGE_MIN_K and no more padded columns than
    128-wide tiles leave (not under packed f16; N = 384 ran at 30.9 TFLOP/s on it against 38.2 on big_db)."""
    big_tiles = math.ceil(m / 128) * math.ceil(n / 128) * batch
    splittable = k >= LONG_K and whole and dtype in SPLIT_DTYPES and batch == 1
    if m >= 128 and n >= 128 and (big_tiles >= 32 or (splittable and big_tiles >= BIG_SPLIT_TILES)):
        v = "big_db" if smem >= smem_bytes("big_db") and db_enabled() else "big_p"
        if (huge and not packed and v == "big_db" and smem >= smem_bytes("huge_db") and k >= HUGE_MIN_K
                and math.ceil(n / 256) * 256 == math.ceil(n / 128) * 128
                and math.ceil(m / 128) * math.ceil(n / 256) * batch >= HUGE_TILES):
            v = "huge_db"
    elif m >= 48 and n >= 48:
        v = "mid_pf"
    else:
        v = "small"
    if packed:
        v = PACKED_PLAIN.get(v, v)
    tm, tn = VARIANTS[v][:2]
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    splits = 1
    if k >= LONG_K and tiles < FEW_TILES:
        fill = fill_workgroups()
        for s in SPLITS:
            if k >= MIN_SPLIT_K * s and ksplit_ok(s, m, n, k, batch, dtype, None, binding_limit) and whole:
                splits = s
                if tiles * s >= fill:
                    break
    return v, splits


def packed_f16(dtype: str, tier) -> bool:
    """Whether an f16 matmul takes the packed-f16 path (vec4<f16> products and sums over at most BK
    k-steps, folded into f32 accumulators): only under fast, the tier that trades accuracy for speed. prod
    and debug (and a program of unknown tier) keep f16 storage with f32 math: the packed partials have
    about 3x torch's f16 error and a narrower range (below), and ran at 0.78x our f32 math's rate on an H100
    (RESULTS.md, 2026-12-05). Range: a partial of BK products (or SCELLIS_MATMUL_FOLD's count,
    matmul.fold_tiles) is held in f16, so it overflows to inf where |sum of those products| > 65504 (e.g. BK=16
    products of 64 x 64), where f32 accumulation would not; error bound and measurements:
    tests/backends/wgpu/test_matmul_packed_f16.py."""
    return dtype == "f16" and tier == "fast"


def _bucket(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(x, 1))))


def shape_class(dtype: str, m: int, n: int, k: int, batch: int) -> str:
    return f"{dtype}:{_bucket(m)}x{_bucket(n)}x{_bucket(k)}:b{min(_bucket(batch), 64)}"


def ksplit_ok(splits: int, m: int, n: int, k: int, batch: int, dtype: str, tier, binding_limit: int) -> bool:
    """Whether a measured or forced K-split of `splits` may run: f32 or f16, one matrix, not under debug (there
    only the shape rule's split runs), partials fit a binding."""
    if splits == 1:
        return True
    return (dtype in SPLIT_DTYPES and batch == 1 and tier != "debug" and k >= 128 * splits
            and m * n * splits * 4 <= binding_limit)


def parse_forced(text: str) -> tuple[str, int]:
    name, _, s = text.partition(":")
    splits = int(s) if s.isdigit() else 1 if not s else 0
    if name not in VARIANTS or splits not in SPLITS:
        raise settings.refuse("SCELLIS_MATMUL_TUNE", text, "auto, off, on, or a matmul config",
                              hint=f"use auto, off, on, or one of {sorted(VARIANTS)}[:{'|'.join(map(str, SPLITS))}]")
    return name, splits


def gpu_adapter(be) -> bool:
    """Whether `be` runs on a GPU (wgpu's adapter type: discrete, integrated or virtual), not on a CPU
    rasterizer such as llvmpipe, or on an adapter of unknown type."""
    return str(getattr(be, "adapter_type", "")).upper() not in ("CPU", "UNKNOWN", "")


def tune_mode(be=None) -> str | tuple[str, int]:
    """SCELLIS_MATMUL_TUNE: "off" (the tile table), "on" (autotune), or one forced (variant, splits); `auto`
    resolved for backend `be` (its program's tier and its adapter's type)."""
    mode = settings.text("SCELLIS_MATMUL_TUNE")
    if mode == "auto":
        return "on" if getattr(be, "tier", None) == "fast" and gpu_adapter(be) else "off"
    return mode if mode in ("off", "on") else parse_forced(mode)


def cache_path(adapter_id: str) -> Path:
    return settings.cache_dir() / "matmul-tune" / (hashlib.sha256(adapter_id.encode()).hexdigest()[:16] + ".json")


class Tuner:
    """Per-backend memo of shape class -> (variant, splits), backed by the on-disk cache."""

    def __init__(self, be):
        self.be = be
        self.path = cache_path(be.adapter_id)
        self.told = False       # whether this backend (a run's own) has said it is timing tiles
        self.table: dict = {}
        try:
            data = json.loads(self.path.read_text())
            if data.get("adapter") == be.adapter_id:
                self.table = {k: (v[0], int(v[1])) for k, v in data.get("configs", {}).items()
                              if v[0] in VARIANTS or (k.startswith("sgm:") and v[0] in SGM_TILES)}
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            self.table = {}

    def save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"adapter": self.be.adapter_id,
                                       "configs": {k: list(v) for k, v in sorted(self.table.items())}}, indent=1))
            os.replace(tmp, self.path)
        except OSError:
            pass        # a cache we cannot write only costs a re-tune next session


def huge_ok(be, ro: bool) -> bool:
    """Whether the table may take huge_db: its operands bind read-only (`ro`) and `be` compiles the matmul
    unchecked (shaders.mode_for); SCELLIS_MATMUL_HUGE=off: never (to compare)."""
    checks_for = getattr(be, "checks_for", None)
    return (bool(ro) and checks_for is not None and checks_for("matmul") == "none"
            and settings.flag("SCELLIS_MATMUL_HUGE"))


def choose(be, dtype: str, m: int, n: int, k: int, batch: int, whole: bool, timer,
           ta: bool = False, tb: bool = False, ro: bool = False, simt: bool = True) -> tuple[str, int]:
    """The (variant, splits) for this chunk. `timer(variant, splits)` returns seconds per run (autotune).
    ta / tb: an operand is read transposed (a separate shape class: its loads differ). ro: A and B bind
    read-only (matmul._readonly; a separate class too: the kernels run differently). simt=False: the chunk runs
    on the matrix units (matmul._sgm_tile tunes their tiles), so the SIMT tiles' timings would say nothing of it
    and the table's pick (its K-split rule) stands."""
    mode = tune_mode(be) if simt else "off"
    tier = getattr(be, "tier", None)
    smem = int(getattr(be, "limits", {}).get("max-compute-workgroup-storage-size", 16384))
    base = default_config(m, n, batch, k, dtype, whole, be.binding_limit, smem, packed_f16(dtype, tier),
                          huge_ok(be, ro))
    if mode == "off":
        return base
    if mode != "on":
        v, s = mode
        if tier == "debug":
            s = base[1]          # the split is the shape rule's: debug reruns sum in one order
        elif not (whole and ksplit_ok(s, m, n, k, batch, dtype, tier, be.binding_limit)):
            s = 1
        return v, s
    tuner = getattr(be, "_matmul_tuner", None)
    if tuner is None:
        tuner = be._matmul_tuner = Tuner(be)
    key = (shape_class(dtype, m, n, k, batch) + (":det" if tier == "debug" else "") + ("" if whole else ":chunk")
           + (":h16" if packed_f16(dtype, tier) else "") + (":ta" if ta else "") + (":tb" if tb else "")
           + (":ro" if ro else "")
           + (f":s{base[1]}" if tier == "debug" else ""))     # debug: the shape rule's split, tile measured
    got = tuner.table.get(key)
    if got is None:
        if not tuner.told:      # a backend's first miss: its pause (pipelines built, candidates timed) is said
            tuner.told = True
            why = "as SCELLIS_MATMUL_TUNE=on asks" if settings.text("SCELLIS_MATMUL_TUNE") == "on" else \
                "tier fast; SCELLIS_MATMUL_TUNE=off keeps the fixed table"
            notice(f"scellis: timing matmul tiles for new shapes on this adapter ({why}); once per shape, "
                   f"cached in {tuner.path.parent}")
        got = tuner.table[key] = autotune(be, dtype, m, n, k, batch, whole, tier, timer, base)
        tuner.save()
    return got


def candidates(dtype, m, n, k, batch, whole, tier, binding_limit, smem_limit: int = 16384) -> list[tuple[str, int]]:
    """Configs to time; under debug only with the shape rule's split (measurement picks the tile alone)."""
    fixed = default_config(m, n, batch, k, dtype, whole, binding_limit)[1] if tier == "debug" else None
    out = []
    for v, (tm, tn, *_rest) in VARIANTS.items():
        if (v == "small" and m >= 64 and n >= 64) or smem_bytes(v) > smem_limit:
            continue
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        for s in SPLITS:
            if fixed is not None:
                if s != fixed:
                    continue
            elif s > 1 and (not whole or tiles * s > 1024 or not ksplit_ok(s, m, n, k, batch, dtype, tier, binding_limit)):
                continue
            out.append((v, s))
    return out


def autotune(be, dtype, m, n, k, batch, whole, tier, timer, base: tuple[str, int]) -> tuple[str, int]:
    """The fastest candidate by `timer`; `base` (the table's pick) where none could be timed."""
    smem = int(getattr(be, "limits", {}).get("max-compute-workgroup-storage-size", 16384))
    best, best_t = base, math.inf
    for cand in candidates(dtype, m, n, k, batch, whole, tier, be.binding_limit, smem):
        try:
            t = timer(*cand)
        except Exception:       # a variant that fails to build or run here is simply not chosen
            continue
        if t < best_t:
            best, best_t = cand, t
    return best


def time_direct(be, shader_a, dispatches, reps: int = 5) -> float:
    """Seconds per run of `dispatches` [(pipeline, bind_group, groups)], outside any program: warm-up, then
    `reps` runs in one submit, ending in a small readback."""
    dev = be.device

    def go(n):
        enc = dev.create_command_encoder()
        p = enc.begin_compute_pass()
        for _ in range(n):
            for pipe, bg, wg in dispatches:
                p.set_pipeline(pipe)
                p.set_bind_group(0, bg)
                p.dispatch_workgroups(*wg)
        p.end()
        dev.queue.submit([enc.finish()])
        dev.queue.read_buffer(shader_a, 0, 4)
    go(2)
    t0 = time.perf_counter()
    go(reps)
    return (time.perf_counter() - t0) / reps
