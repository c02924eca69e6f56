"""Arithmetic a Program performs, so a fix that trades memory for compute can say how much compute.

Counts multiply-adds as 2 FLOPs for matmul and attention and one operation per output element for
everything else: a ratio between two Programs of the same model, not a roofline.
"""
from __future__ import annotations

import math


def program_flops(prog) -> int:
    total = 0
    for s in prog.steps:
        v = prog.values[s]
        shape = v.shape[0] if isinstance(v.dtype, tuple) else v.shape
        if v.op in ("matmul", "matmul_fused"):
            ta = v.attrs.get("trans_a") or v.attrs.get("trans", (False, False))[0]
            k = prog.values[v.inputs[0]].shape[-2 if ta else -1]
            total += 2 * math.prod(shape) * int(k)
            if v.op == "matmul_fused":
                total += len(v.attrs["code"]) * math.prod(shape)
        elif v.op in ("attention", "attention_bwd"):
            q, kk = prog.values[v.inputs[0]].shape, prog.values[v.inputs[1]].shape
            fwd = 4 * math.prod(q[:-1]) * int(kk[-2]) * int(q[-1])
            total += fwd if v.op == "attention" else int(2.5 * fwd)
        else:
            total += math.prod(shape)
    return total
