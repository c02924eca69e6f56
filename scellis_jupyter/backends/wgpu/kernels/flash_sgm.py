"""Flash attention on the matrix units (kernels/flash_sgm.wgsl): which shapes take it, its blocks, its sources.

Why: f16 attention on the score path (attention_scores.py) runs its products on the matrix units but writes and
reads L x L f32 scores several times, so on an H100 it ran at 0.03-0.05x of torch's SDPA (benchmarks/RESULTS.md,
2026-12-07): the score traffic, not the products, set its pace. These kernels keep the scores in workgroup memory
block by block, FlashAttention-2's loop order, with every product on subgroup matrices and the softmax in f32 by
threads. They take f16 (or an f32 configuration's f32) operands whose head sizes are multiples of the fragment
sizes, no bool mask and no dropout (those keep the score path or the SIMT flash kernels), under the tiers that
allow the matrix units (matmul_sgm.config_for: never debug). The launcher is attention.py's, with the same
Params, bindings, chunk plan and stats pass as the SIMT flash kernels.

Blocks: a workgroup of NSG subgroups owns BR = NSG * M8 rows (one fragment row a subgroup) and stages BC rows of
the other operand a step, the largest BC (a multiple of the fragment sizes) whose workgroup memory fits the
adapter's limit (smem_bytes).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..templates import WGSL_TYPE, enable_f16, render, snippet
from . import matmul_sgm

NSG = 4                          # subgroups a workgroup, one row fragment each
BCS = (64, 32, 16, 8, 4)         # staged rows a step, largest first
PAD_BYTES = 16                   # each staged row padded by 16 bytes (fragment loads stay 16-byte aligned)
KINDS = ("fwd", "dq", "dkdv")


@dataclass(frozen=True)
class Plan:
    """One kernel's shape: its configuration, head sizes, rows owned (br) and staged a step (bc)."""

    cfg: matmul_sgm.Config
    kind: str
    d: int
    dv: int
    br: int
    bc: int


def _layout(cfg: matmul_sgm.Config, kind: str, d: int, dv: int, bc: int) -> dict:
    """Row strides (elements) and lengths of the kernel's workgroup arrays, and their bytes (`bytes`)."""
    isz = 2 if cfg.component == "f16" else 4
    ph, pf = PAD_BYTES // isz, PAD_BYTES // 4
    br = NSG * cfg.m
    if kind == "fwd":
        lay = dict(KSTR=d + ph, VSTR=dv + ph, PSTR=max(bc, d) + ph, SSTR=max(bc, dv) + pf)
        lay.update(KS_LEN=bc * lay["KSTR"], VS_LEN=bc * lay["VSTR"], PS_LEN=br * lay["PSTR"],
                   SS_LEN=br * lay["SSTR"])
        half, full = lay["KS_LEN"] + lay["VS_LEN"] + lay["PS_LEN"], lay["SS_LEN"] + 3 * br + 2
    elif kind == "dq":
        lay = dict(KSTR=d + ph, VSTR=dv + ph, XSTR=max(bc, d, dv) + ph, SSTR=bc + pf, OSTR=d + pf)
        lay.update(KS_LEN=bc * lay["KSTR"], VS_LEN=bc * lay["VSTR"], XS_LEN=br * lay["XSTR"],
                   DOFF=br * lay["SSTR"], FS_LEN=max(2 * br * lay["SSTR"], br * lay["OSTR"]))
        half, full = lay["KS_LEN"] + lay["VS_LEN"] + lay["XS_LEN"], lay["FS_LEN"] + 2 * br
    else:
        kv = max(d, dv) + ph
        lay = dict(QSTR=d + ph, GSTR=dv + ph, PSTR=bc + ph, KVSTR=kv, SSTR=bc + pf, OSTR=max(d, dv) + pf)
        lay.update(QS_LEN=bc * lay["QSTR"], GS_LEN=bc * lay["GSTR"], PS_LEN=br * max(lay["PSTR"], kv),
                   ES_LEN=br * lay["PSTR"], DOFF=br * lay["SSTR"],
                   FS_LEN=max(2 * br * lay["SSTR"], br * lay["OSTR"]))
        half = lay["QS_LEN"] + lay["GS_LEN"] + lay["PS_LEN"] + lay["ES_LEN"]
        full = lay["FS_LEN"] + 2 * bc
    lay["bytes"] = half * isz + full * 4
    return lay


def smem_bytes(cfg: matmul_sgm.Config, kind: str, d: int, dv: int, bc: int) -> int:
    """Workgroup memory of one kernel."""
    return _layout(cfg, kind, d, dv, bc)["bytes"]


def plan(be, kind: str, dtype: str, d: int, dv: int, tier) -> Plan | None:
    """The block shape of kernel `kind` for `dtype` operands and head sizes d, dv on `be`, or None where these
    kernels do not run: no configuration for `dtype` under `tier`, head sizes not multiples of the fragment
    sizes (or over 256), too many invocations, or no BC whose workgroup memory fits."""
    cfg = matmul_sgm.config_for(be, dtype, tier)
    if cfg is None or cfg.component != dtype:
        return None
    step = math.lcm(cfg.k, cfg.n, 4)
    if min(d, dv) <= 0 or d % step or dv % step or max(d, dv) > 256:
        return None
    lim = getattr(be, "limits", {})
    threads = NSG * cfg.sgs
    if threads > int(lim.get("max-compute-invocations-per-workgroup", 256)) or \
            threads > int(lim.get("max-compute-workgroup-size-x", 256)):
        return None
    smem = matmul_sgm.smem_limit(be)
    # emulated: at most 2 fragments a step (every fragment builtin is an unrolled loop there; CPU compilers
    # slow down steeply on more)
    most = 2 * max(cfg.n, cfg.k) if cfg.emulated else max(BCS)
    for bc in BCS:
        if bc <= most and bc % cfg.n == 0 and bc % cfg.k == 0 and smem_bytes(cfg, kind, d, dv, bc) <= smem:
            return Plan(cfg, kind, d, dv, NSG * cfg.m, bc)
    return None


def key(pl: Plan, causal: bool) -> str:
    """The pipeline key of a plan's kernel."""
    return f"flash_sgm:{pl.kind}:{matmul_sgm.key(pl.cfg, 'f')}:d{pl.d}:dv{pl.dv}:br{pl.br}:bc{pl.bc}:c{int(causal)}"


@functools.lru_cache(maxsize=None)
def source(pl: Plan, causal: bool) -> str:
    """WGSL of a plan's kernel (causal or not)."""
    cfg, kind, d, dv, br, bc = pl.cfg, pl.kind, pl.d, pl.dv, pl.br, pl.bc
    lay = _layout(cfg, kind, d, dv, bc)
    t = WGSL_TYPE[cfg.component]
    m8, n8, k8 = cfg.m, cfg.n, cfg.k
    mode = "emu" if cfg.emulated else "real"
    sn_ = functools.partial(snippet, "flash_sgm")
    rows = {"LEFT": (m8, k8), "RIGHT": (k8, n8), "RES": (m8, n8)}
    kinds = {"l": "LEFT", "r": "RIGHT", "a": "RES"}

    def ld_fn(what: str, arr: str, col: bool) -> str:
        return f"ld_{what}_{arr}_{'c' if col else 'r'}"

    used: dict[str, str] = {}

    def ld(what: str, arr: str, col: bool) -> str:
        name = ld_fn(what, arr, col)
        if name not in used:
            kd = kinds[what]
            r, c = rows[kd]
            used[name] = sn_(f"{mode}_ld", FN=name, KIND=kd, ARR=arr, COL=str(col).lower(), ROWS=r, COLS=c)
        return name

    def st(arr: str) -> str:
        name = f"st_{arr}"
        if name not in used:
            used[name] = sn_(f"{mode}_st", FN=name, ARR=arr, MN8=m8 * n8, N8=n8)
        return name

    def frag_ld(v, fn, off, stride, decl=True):
        return sn_("frag_ld" if decl else "frag_set", V=v, FN=fn, OFF=off, STR=stride)

    def zero(prefix, n):
        return "\n".join(sn_("frag_zero", V=f"{prefix}{j}") for j in range(n))

    def own(stride):                     # this subgroup's first row in a workgroup array of row stride `stride`
        return f"sg * {m8 * stride}u"

    def held(prefix, arr, n, stride):
        """n left fragments of this subgroup's rows, k8 columns apart, from `arr` into registers prefix0.."""
        return "\n".join(frag_ld(f"{prefix}{i}", ld("l", arr, False), f"{own(stride)} + {i * k8}u", stride)
                         for i in range(n))

    def products(lefts, nk, arr, stride, dst, sstride, base=0):
        """For every N8 block c of `arr`'s bc staged rows: sum_i lefts[i] x (arr rows c, columns i k8)^T,
        stored at row stride sstride into dst (offset base)."""
        out = []
        for c in range(bc // n8):
            lines = [sn_("frag_zero", V="s")]
            for i in range(nk):
                lines.append(frag_ld("b", ld("r", arr, True), f"{c * n8 * lay[stride]}u + {i * k8}u", lay[stride],
                                     decl=i == 0))
                lines.append(sn_("frag_mma", V="s", A=f"{lefts}{i}", B="b"))
            lines.append(sn_("frag_st", FN=st(dst), OFF=f"{base}u + {own(sstride)} + {c * n8}u", V="s",
                             STR=sstride))
            out.append("{\n" + "\n".join(lines) + "\n}")
        return "\n".join(out)

    def accumulate(acc, n, larr, lstride, rarr, rstride):
        """acc_j += (this subgroup's rows of larr, k columns) x (rarr rows k, columns j n8) over the bc k."""
        out = []
        for kk in range(bc // k8):
            lines = [frag_ld("a", ld("l", larr, False), f"{own(lstride)} + {kk * k8}u", lstride)]
            for j in range(n):
                lines.append(frag_ld("b", ld("r", rarr, False), f"{kk * k8 * rstride + j * n8}u", rstride,
                                     decl=j == 0))
                lines.append(sn_("frag_mma", V=f"{acc}{j}", A="a", B="b"))
            out.append("{\n" + "\n".join(lines) + "\n}")
        return "\n".join(out)

    def store(acc, n, stride, arr, base=0):
        return "\n".join(sn_("frag_st", FN=st(arr), OFF=f"{base}u + {own(stride)} + {j * n8}u", V=f"{acc}{j}",
                             STR=stride) for j in range(n))

    def stage(fn, src, dst, w, nrows, stride):
        return sn_("stage", FN=fn, SRC=src, DST=dst, W=w, W4=w // 4, ROWS=nrows, STR=stride, T=t)

    subs: dict = {}
    if kind == "fwd":
        pst, sst = lay["PSTR"], lay["SSTR"]
        subs.update(
            STAGES="\n".join([stage("stage_q", "q", "Ps", d, br, pst), stage("stage_k", "k", "Ks", d, bc, lay["KSTR"]),
                              stage("stage_v", "v", "Vs", dv, bc, lay["VSTR"])]),
            LOAD_Q=held("qf", "Ps", d // k8, pst), ZERO_O=zero("of", dv // n8),
            SCORES=products("qf", d // k8, "Ks", "KSTR", "Fs", sst),
            STORE_O=store("of", dv // n8, sst, "Fs"),
            RELOAD_O="\n".join(frag_ld(f"of{j}", ld("a", "Fs", False), f"{own(sst)} + {j * n8}u", sst, decl=False)
                               for j in range(dv // n8)),
            PV=accumulate("of", dv // n8, "Ps", pst, "Vs", lay["VSTR"]))
    elif kind == "dq":
        xst, sst = lay["XSTR"], lay["SSTR"]
        subs.update(
            STAGES="\n".join([stage("stage_q", "q", "Xs", d, br, xst), stage("stage_g", "dout", "Xs", dv, br, xst),
                              stage("stage_k", "k", "Ks", d, bc, lay["KSTR"]),
                              stage("stage_v", "v", "Vs", dv, bc, lay["VSTR"])]),
            LOAD_Q=held("qf", "Xs", d // k8, xst), LOAD_G=held("gf", "Xs", dv // k8, xst), ZERO_DQ=zero("dqf", d // n8),
            SCORES=products("qf", d // k8, "Ks", "KSTR", "Fs", sst),
            DPROBS=products("gf", dv // k8, "Vs", "VSTR", "Fs", sst, lay["DOFF"]),
            DQ=accumulate("dqf", d // n8, "Xs", xst, "Ks", lay["KSTR"]),
            STORE_DQ=store("dqf", d // n8, lay["OSTR"], "Fs"))
    else:
        kvs, pst, sst, ost = lay["KVSTR"], lay["PSTR"], lay["SSTR"], lay["OSTR"]
        subs.update(
            STAGES="\n".join([stage("stage_kp", "k", "Ps", d, br, kvs), stage("stage_vp", "v", "Ps", dv, br, kvs),
                              stage("stage_q", "q", "Qs", d, bc, lay["QSTR"]),
                              stage("stage_g", "dout", "Gs", dv, bc, lay["GSTR"])]),
            LOAD_K=held("kf", "Ps", d // k8, kvs), LOAD_V=held("vf", "Ps", dv // k8, kvs),
            ZERO_DKDV=zero("dkf", d // n8) + "\n" + zero("dvf", dv // n8),
            SCORES=products("kf", d // k8, "Qs", "QSTR", "Fs", sst),
            DPROBS=products("vf", dv // k8, "Gs", "GSTR", "Fs", sst, lay["DOFF"]),
            DV_ACC=accumulate("dvf", dv // n8, "Ps", pst, "Gs", lay["GSTR"]),
            DK_ACC=accumulate("dkf", d // n8, "Es", pst, "Qs", lay["QSTR"]),
            STORE_DK=store("dkf", d // n8, ost, "Fs"), STORE_DV=store("dvf", dv // n8, ost, "Fs"))
    types = (sn_("emu_types", T=t, MK8=m8 * k8, KN8=k8 * n8, MN8=m8 * n8, M8=m8, N8=n8, K8=k8) if cfg.emulated
             else sn_("real_types", T=t, M8=m8, N8=n8, K8=k8))
    enable = enable_f16(cfg.component)
    if not cfg.emulated:
        enable = "\n".join(x for x in (enable, "enable chromium_experimental_subgroup_matrix;") if x)
    frags = "\n".join([types] + list(used.values()))
    return render("flash_sgm", kind, ENABLE=enable, T=t, D=d, DV=dv, NT=NSG * cfg.sgs, BR=br, BC=bc,
                  CAUSAL=str(causal).lower(), FRAGS=frags,
                  SGID_PARAM="" if cfg.emulated else sn_("real_sgid_param"),
                  SGID=sn_("emu_sgid", SGS=cfg.sgs) if cfg.emulated else "",
                  **{k: v for k, v in lay.items() if k != "bytes"}, **subs)
