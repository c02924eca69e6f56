"""Adam with blockwise 8-bit state (after Dettmers et al., 2022, "8-bit Optimizers via Block-wise Quantization").

Why: m and v cost 1 byte per element plus one f32 scale per block instead of 8 bytes, and the planner
sees that because the state is declared as i8 codes and per-block scales. Each step dequantizes m and v,
runs the exact Adam update in f32 (so only the stored state is rounded), and requantizes:
  blocks: the flattened parameter in blocks of block_size (one block of all elements if smaller),
          codes of shape (n_blocks, block), scales of shape (n_blocks,);
  m: signed square-root companding, code = round(127 sign(m) sqrt(|m| / absmax)), scale = absmax;
  v: fourth-root companding over all 256 codes (the engine has i8, no u8),
     code = round(255 (v / max)^(1/4)) - 128, scale = max.
The companding stands in for bitsandbytes' dynamic (tree) quantization: it spends codes near zero where
Adam's small moments live, using only primitives every backend has. weight_decay is decoupled (AdamW);
0 gives Adam. Rounding is half away from zero.
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F
from scellis_jupyter.graph.node import Node


@optimizer("int8adam", summary="Adam/AdamW with blockwise 8-bit m and v (i8 codes + per-block scales)", params={
    "lr": Param(float, 1e-3, lo=0.0, doc="step size (the scheduled value arrives as the lr node)"),
    "betas": Param(tuple, (0.9, 0.999), lo=0.0, hi=1.0, hi_open=True, length=2, doc="EMA rates of m and v"),
    "eps": Param(float, 1e-8, lo=0.0, doc="added to sqrt(v_hat)"),
    "weight_decay": Param(float, 0.0, lo=0.0, doc="decoupled: p *= 1 - lr * weight_decay"),
    "block_size": Param(int, 256, lo=1, doc="elements per quantization block (one scale each)"),
})
class Int8Adam:
    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, block_size=256):
        self.lr, self.betas, self.eps = lr, tuple(betas), eps
        self.weight_decay, self.block_size = weight_decay, block_size

    def blocks(self, shape: tuple) -> tuple[int, int]:
        """(n_blocks, block) for a parameter of this shape."""
        n = 1
        for s in shape:
            n *= s
        blk = max(1, min(self.block_size, n))
        return -(-n // blk), blk

    def state(self, shape: tuple, dtype: str) -> list[StateDecl]:
        s = "f64" if dtype == "f64" else "f32"
        nb, blk = self.blocks(tuple(shape))
        return [StateDecl("m_q", (nb, blk), "i8"), StateDecl("m_scale", (nb,), s),
                StateDecl("v_q", (nb, blk), "i8"), StateDecl("v_scale", (nb,), s)]

    def update(self, p: Node, g: Node, state: dict[str, Node], step: Node, lr: Node) -> tuple[Node, dict[str, Node]]:
        c = state["m_scale"].dtype
        shape = tuple(p.shape)
        nb, blk = self.blocks(shape)
        n = p.numel
        x, g, t, lr = _blocked(F.cast(p, c), nb, blk), _blocked(F.cast(g, c), nb, blk), F.cast(step, c), F.cast(lr, c)
        b1, b2 = self.betas
        m = F.add(F.mul(decode_m(state["m_q"], state["m_scale"]), b1), F.mul(g, 1.0 - b1))
        v = F.add(F.mul(decode_v(state["v_q"], state["v_scale"]), b2), F.mul(F.mul(g, g), 1.0 - b2))
        if self.weight_decay:
            x = F.mul(x, F.sub(1.0, F.mul(lr, self.weight_decay)))
        bc1 = F.sub(1.0, F.pow_(b1, t))
        bc2 = F.sub(1.0, F.pow_(b2, t))
        denom = F.add(F.div(F.sqrt(v), F.sqrt(bc2)), self.eps)
        x = F.sub(x, F.mul(F.div(lr, bc1), F.div(m, denom)))
        m_q, m_scale = encode_m(m)
        v_q, v_scale = encode_v(v)
        x = F.reshape(F.getitem(F.reshape(x, (nb * blk,)), slice(0, n)), shape)
        return F.cast(x, p.dtype), {"m_q": m_q, "m_scale": m_scale, "v_q": v_q, "v_scale": v_scale}


def _blocked(x: Node, nb: int, blk: int) -> Node:
    """Flatten, zero-pad to nb * blk and view as (nb, blk)."""
    flat = F.reshape(x, (x.numel,))
    pad = nb * blk - x.numel
    if pad:
        flat = F.concat([flat, F.zeros((pad,), x.dtype)], 0)
    return F.reshape(flat, (nb, blk))


def _round_i8(y: Node) -> Node:
    """Round half away from zero to i8 (the cast truncates toward zero)."""
    return F.cast(F.add(y, F.mul(F.sign(y), 0.5)), "i8")


def _per_block(a: Node) -> tuple[Node, Node]:
    """(scale as (nb,), a safe divisor as (nb, 1)): a block of zeros gets divisor 1 and codes 0."""
    safe = F.where(F.gt(a, 0.0), a, 1.0)
    return F.reshape(a, (a.shape[0],)), safe


def encode_m(m: Node) -> tuple[Node, Node]:
    scale, safe = _per_block(F.max_(F.abs_(m), 1, keepdims=True))
    return _round_i8(F.mul(F.mul(F.sign(m), F.sqrt(F.div(F.abs_(m), safe))), 127.0)), scale


def decode_m(q: Node, scale: Node) -> Node:
    y = F.div(F.cast(q, scale.dtype), 127.0)
    return F.mul(F.mul(F.abs_(y), y), F.reshape(scale, (scale.shape[0], 1)))


def encode_v(v: Node) -> tuple[Node, Node]:
    scale, safe = _per_block(F.max_(v, 1, keepdims=True))
    u = F.sqrt(F.sqrt(F.div(v, safe)))
    return _round_i8(F.sub(F.mul(u, 255.0), 128.0)), scale


def decode_v(q: Node, scale: Node) -> Node:
    u = F.div(F.add(F.cast(q, scale.dtype), 128.0), 255.0)
    u2 = F.mul(u, u)
    return F.mul(F.mul(u2, u2), F.reshape(scale, (scale.shape[0], 1)))
