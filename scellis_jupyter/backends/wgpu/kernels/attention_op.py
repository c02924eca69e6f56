"""The outer-product flash-attention forward (kernels/flash_fwd_op.wgsl): its tile choice and its source.

Why: the register-tiled forward of flash_fwd.wgsl computes each score as a dot product over vec4s of
Q and K rows (6 workgroup-memory loads per 32 multiply-adds) and sums P V through one vec4 of P per
key; this kernel stages Q and K transposed and updates RG x 4 CG score vec4s per head element from
RG + CG loads, like the matmul's 8x8 tiles, with the row max over subgroup shuffles when the device has
`subgroup`. The unrolled per-thread code (named accumulators: a runtime-indexed private array spills)
is assembled here from the file's sections.

Selection (benchmarking; the defaults stay flash_fwd.wgsl / flash_bwd.wgsl until measured on the H200:
DEFAULT says which kernels run when the environment names none):
SCELLIS_ATTENTION_FWD=op takes the first tile of OP_TILES that fits, `op:RGxCGxNY` forces one, `tiled`
the register-tiled kernels of flash_fwd.wgsl; SCELLIS_ATTENTION_SG=off keeps the workgroup-memory row
max even where subgroups are granted.
"""
from __future__ import annotations

import os

from ..templates import snippet

# (RG row groups of 4 rows, CG key groups of 4 keys per thread, NY thread rows): first that fits
OP_TILES = ((2, 1, 8), (1, 1, 16), (2, 1, 4), (1, 1, 8), (1, 1, 4))
DEFAULT = {"fwd": "", "dkdv": "", "dq": ""}     # "op" makes a kernel of this module the default
OP_HEAD = 64
LANES = "xyzw"


def op_smem(d: int, dv: int, rg: int, cg: int, ny: int, sg: bool) -> int:
    """Workgroup-memory bytes of the kernel (the arrays of flash_fwd_op.wgsl)."""
    bq4, bk4, bk, nt = rg * ny, 8 * cg, 32 * cg, 8 * ny
    vw = 8 * (1 if dv <= 32 else 2)
    vec4s = d * bq4 + d * bk4 + bk * vw + bk * (bq4 + 1) + (0 if sg else nt * rg)
    return 16 * vec4s


def use_subgroups(be) -> bool:
    return bool(getattr(be, "subgroups", False)) and os.environ.get("SCELLIS_ATTENTION_SG", "on") != "off"


def op_cfg(be, d: int, dv: int):
    """(RG, CG, NY, SG) of the outer-product forward when SCELLIS_ATTENTION_FWD asks for it and a tile
    fits the adapter, else None."""
    want = os.environ.get("SCELLIS_ATTENTION_FWD", DEFAULT["fwd"])
    if not want.startswith("op") or max(d, dv) > OP_HEAD:
        return None
    sg = use_subgroups(be)
    lim = int(be.limits.get("max-compute-workgroup-storage-size", 16384))
    inv = int(be.limits.get("max-compute-invocations-per-workgroup", 256))
    cands = OP_TILES
    if ":" in want:
        cands = (tuple(int(x) for x in want.split(":", 1)[1].split("x")),)
    for rg, cg, ny in cands:
        if rg in (1, 2) and cg in (1, 2) and op_smem(d, dv, rg, cg, ny, sg) <= lim and 8 * ny <= inv:
            return rg, cg, ny, sg
    return None


def op_subs(rg: int, cg: int, ny: int, dv: int, sg: bool, drop: bool) -> dict:
    """The generated placeholders (DECL, SCORES, MASK, ROWMAX, SOFTMAX, PV, ROWSUM, STORE) and sizes."""
    sn = lambda sec, **kw: snippet("flash_fwd_op", sec, flags={"DROP": drop}, **kw)  # noqa: E731
    cv = 1 if dv <= 32 else 2
    gs, js, rs, cs = range(rg), range(4 * cg), range(4 * rg), range(cv)
    decl = [sn("decl", G=g) for g in gs] + [sn("o_decl", R=r, C=c) for r in rs for c in cs]
    body = ([sn("a_reg", G=g, OFF=g * ny) for g in gs] + [sn("b_reg", H=h, OFF=8 * h) for h in range(cg)]
            + [sn("s_fma", G=g, J=j, H=j // 4, L=LANES[j % 4]) for g in gs for j in js])
    scores = [sn("s_decl", G=g, J=j) for g in gs for j in js] + [sn("d_loop", BODY="\n".join(body))]
    mask = [sn("mask", G=g, J=j, OFF=g * ny, KO=8 * j) for g in gs for j in js]
    rowmax = [sn("pm_init", G=g) for g in gs] + [sn("pm_max", G=g, J=j) for g in gs for j in js if j]
    if sg:
        rowmax += [sn("sg_max", G=g, X=x) for x in (1, 2, 4) for g in gs]
    else:
        rowmax += [sn("red_put", G=g) for g in gs] + [sn("barrier")] + [sn("red_max", G=g) for g in gs]
    soft = [sn("stats", G=g) for g in gs] + [sn("p_val", G=g, J=j) for g in gs for j in js]
    soft += [sn("l_upd", G=g, SUM=" + ".join(f"p{g}_{j}" for j in js)) for g in gs]
    soft += [sn("p_put", G=g, J=j, OFF=g * ny, KO=8 * j) for g in gs for j in js]
    soft += [sn("o_corr", R=r, C=c, G=r // 4, L=LANES[r % 4]) for r in rs for c in cs]
    pv = ([sn("pa_reg", G=g, OFF=g * ny) for g in gs] + [sn("vb_reg", C=c, CO=8 * c) for c in cs]
          + [sn("pv_fma", R=r, C=c, G=r // 4, L=LANES[r % 4]) for r in rs for c in cs])
    if sg:
        rowsum = [sn("sg_sum", G=g, X=x) for x in (1, 2, 4) for g in gs]
    else:
        rowsum = ([sn("barrier")] + [sn("red_lput", G=g) for g in gs] + [sn("barrier")]
                  + [sn("red_sum", G=g) for g in gs])
    store = [sn("store", OFF=(r // 4) * ny, I=r % 4, G=r // 4, L=LANES[r % 4], R=r, C1=cv - 1) for r in rs]
    j = "\n".join
    return dict(RG=rg, CG=cg, NY=ny, CV=cv, NT=8 * ny, DECL=j(decl), SCORES=j(scores), MASK=j(mask),
                ROWMAX=j(rowmax), SOFTMAX=j(soft), PV=j(pv), ROWSUM=j(rowsum), STORE=j(store))


# ---- backward (kernels/flash_bwd_op.wgsl): dkdv and dq with 4 RG x 4 CG tiles per thread ----------
# SCELLIS_ATTENTION_DKDV / SCELLIS_ATTENTION_DQ = op (first tile of BWD_TILES that fits) or op:RGxCGxNY;
# SCELLIS_ATTENTION_BWD=op sets both; `tiled` selects flash_bwd.wgsl's kernel.
BWD_TILES = {"dkdv": ((1, 1, 8), (1, 1, 4)), "dq": ((1, 1, 8), (2, 1, 4), (1, 1, 4))}


def _bwd_dims(d: int, dv: int) -> tuple[int, int]:
    """(CV column vec4s per thread, RS odd vec4 stride of a staged row)."""
    m = max((d + 3) // 4, (dv + 3) // 4)
    return (1 if max(d, dv) <= 32 else 2), (m if m % 2 else m + 1)


def bwd_smem(kind: str, d: int, dv: int, rg: int, cg: int, ny: int) -> int:
    _, rs = _bwd_dims(d, dv)
    br, bc, ps = 4 * rg * ny, 32 * cg, rg * ny + 1
    if kind == "dkdv":
        return 16 * (2 * br * rs + 2 * bc * rs + 2 * bc * ps) + 8 * bc
    return 16 * (2 * br * rs + 2 * bc * rs + bc * ps) + 8 * br


def bwd_cfg(be, kind: str, d: int, dv: int):
    """(RG, CG, NY) of the op kernel `kind` when the environment asks for it and a tile fits, else None."""
    want = os.environ.get(f"SCELLIS_ATTENTION_{kind.upper()}", os.environ.get("SCELLIS_ATTENTION_BWD", DEFAULT[kind]))
    if not want.startswith("op") or max(d, dv) > OP_HEAD:
        return None
    lim = int(be.limits.get("max-compute-workgroup-storage-size", 16384))
    inv = int(be.limits.get("max-compute-invocations-per-workgroup", 256))
    cands = BWD_TILES[kind]
    if ":" in want:
        cands = (tuple(int(x) for x in want.split(":", 1)[1].split("x")),)
    for rg, cg, ny in cands:
        if rg in (1, 2) and cg in (1, 2) and bwd_smem(kind, d, dv, rg, cg, ny) <= lim and 8 * ny <= inv:
            return rg, cg, ny
    return None


def bwd_subs(kind: str, rg: int, cg: int, ny: int, d: int, dv: int, drop: bool) -> dict:
    """Placeholders of flash_bwd_op.wgsl's section `kind` (DECL, SCORES, MASK, PROBS, UPDATE, STORE)."""
    sn = lambda sec, **kw: snippet("flash_bwd_op", sec, flags={"DROP": drop}, **kw)  # noqa: E731
    cv, rs = _bwd_dims(d, dv)
    gs, js, rr, cs = range(rg), range(4 * cg), range(4 * rg), range(cv)
    kv = kind == "dkdv"
    own, oth, own2, oth2 = (("ks", "qs", "vs", "gs") if kv else ("qs", "ks", "gs", "vs"))

    def loop(n, a, b, acc):
        body = ([sn("own_regs", P="oa", A=a, G=g, OFF=g * ny) for g in gs]
                + [sn("oth_reg", P="ob", A=b, J=j, KO=8 * j) for j in js]
                + [sn("dot_acc", N=f"{acc}{g}_{j}", P="oa", G=g, Q="ob", J=j) for g in gs for j in js])
        return sn("d_loop", N=n, BODY="\n".join(body))

    scores = ([sn("acc", N=f"{x}{g}_{j}") for x in "sx" for g in gs for j in js]
              + [loop("D4", own, oth, "s"), loop("V4", own2, oth2, "x")])
    mask = [sn("mask_t" if kv else "mask_q", G=g, J=j, OFF=g * ny, KO=8 * j) for g in gs for j in js]
    probs = [sn("probs_t" if kv else "probs_q", G=g, J=j, OFF=g * ny, KO=8 * j) for g in gs for j in js]
    if kv:
        decl = [sn("acc", N=f"{x}{r}_{c}") for x in "kv" for r in rr for c in cs]
        upd = ([sn("upd_reg", P="pa", A="pt", G=g, OFF=g * ny) for g in gs]
               + [sn("upd_reg", P="da", A="dst", G=g, OFF=g * ny) for g in gs]
               + [sn("upd_col", P="gq", A="gs", C=c, CO=8 * c) for c in cs]
               + [sn("upd_col", P="qq", A="qs", C=c, CO=8 * c) for c in cs]
               + [sn("upd_fma", N=f"v{r}_{c}", P="pa", G=r // 4, L=LANES[r % 4], Q="gq", C=c) for r in rr for c in cs]
               + [sn("upd_fma", N=f"k{r}_{c}", P="da", G=r // 4, L=LANES[r % 4], Q="qq", C=c) for r in rr for c in cs])
        store = [sn("store_key", OFF=(r // 4) * ny, I=r % 4, R=r, C1=cv - 1) for r in rr]
    else:
        decl = [sn("acc", N=f"a{r}_{c}") for r in rr for c in cs]
        upd = ([sn("upd_reg", P="da", A="dss", G=g, OFF=g * ny) for g in gs]
               + [sn("upd_col", P="kk", A="ks", C=c, CO=8 * c) for c in cs]
               + [sn("upd_fma", N=f"a{r}_{c}", P="da", G=r // 4, L=LANES[r % 4], Q="kk", C=c) for r in rr for c in cs])
        store = [sn("store_row", OFF=(r // 4) * ny, I=r % 4, R=r, C1=cv - 1) for r in rr]
    j = "\n".join
    return dict(RG=rg, CG=cg, NY=ny, CV=cv, RS=rs, NT=8 * ny, DECL=j(decl), SCORES=j(scores), MASK=j(mask),
                PROBS=j(probs), UPDATE=j(upd), STORE=j(store))
