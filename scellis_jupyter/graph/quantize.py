"""Blockwise weight quantization (int8, int4, NF4) and its measured error against the f32 weight.

Why blockwise absmax: one outlier only widens the scale of its own block (64 values by default), so the
rest of the tensor keeps its resolution (Dettmers et al. 2022/2023). All three formats are symmetric:
int8 and int4 use uniform levels q·absmax/qmax, NF4 uses the 16 normal-quantile levels of QLoRA, which
spend resolution where normally distributed weights are dense. NF4 codes use the same packing as the
`nf4_dequant` graph op (two codes per byte, low nibble first), so `encode` output feeds the op directly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import QuantizeError, did_you_mean
from .opset import NF4_TABLE

FORMATS = ("int8", "int4", "nf4")
_QMAX = {"int8": 127, "int4": 7}
_NF4 = np.asarray(NF4_TABLE, np.float32)
_NF4_MID = (_NF4[1:] + _NF4[:-1]) / 2          # decision boundaries: nearest level


@dataclass(frozen=True)
class QuantizedTensor:
    """codes: int8 per element (int8/int4) or packed NF4 bytes (int8 array, two codes each);
    absmax: f32 per block of `block` elements of the flattened tensor."""

    fmt: str
    shape: tuple
    block: int
    codes: np.ndarray
    absmax: np.ndarray

    @property
    def nbytes(self) -> int:
        """Stored bytes; int4 counts half a byte per code (it packs like NF4 when stored)."""
        n = int(np.prod(self.shape, dtype=np.int64))
        code_bytes = n if self.fmt == "int8" else (n + 1) // 2
        return code_bytes + 4 * self.absmax.size


def _blocks(w: np.ndarray, block: int) -> tuple[np.ndarray, int]:
    flat = np.asarray(w, np.float32).reshape(-1)
    n = flat.size
    nb = -(-n // block)
    pad = np.zeros(nb * block, np.float32)
    pad[:n] = flat
    return pad.reshape(nb, block), n


def quantize(w: np.ndarray, fmt: str = "nf4", block: int = 64) -> QuantizedTensor:
    """Symmetric blockwise absmax quantization of a float array."""
    if fmt not in FORMATS:
        raise QuantizeError(f"unknown quantization format {fmt!r}", where="quantize",
                            hint=did_you_mean(fmt, FORMATS) or f"use one of {', '.join(FORMATS)}")
    if not isinstance(block, (int, np.integer)) or block < 1:
        raise QuantizeError(f"block must be a positive integer, got {block!r}", where="quantize")
    w = np.asarray(w)
    if w.dtype.kind != "f":
        raise QuantizeError(f"quantize needs a float array, got {w.dtype}", where="quantize")
    if not np.all(np.isfinite(w)):
        raise QuantizeError("cannot quantize non-finite values", where="quantize",
                            hint="check the weight for NaN/inf first")
    b, n = _blocks(w, int(block))
    amax = np.abs(b).max(axis=1).astype(np.float32)
    safe = np.where(amax > 0, amax, np.float32(1.0))[:, None]
    x = b / safe
    if fmt == "nf4":
        q = np.searchsorted(_NF4_MID, x.reshape(-1)).astype(np.uint8)[:n]
        if n % 2:
            q = np.append(q, np.uint8(7))           # pad with the code of 0.0
        codes = (q[0::2] | (q[1::2] << 4)).astype(np.uint8).view(np.int8)
    else:
        qmax = _QMAX[fmt]
        codes = np.clip(np.rint(x * qmax), -qmax, qmax).astype(np.int8).reshape(-1)[:n]
    return QuantizedTensor(fmt, tuple(w.shape), int(block), codes, amax)


def dequantize(q: QuantizedTensor) -> np.ndarray:
    """The f32 array the codes stand for (NF4: the same lookup as the `nf4_dequant` op)."""
    n = int(np.prod(q.shape, dtype=np.int64))
    scale = q.absmax[np.arange(n) // q.block]
    if q.fmt == "nf4":
        b = q.codes.view(np.uint8)
        nib = np.empty(2 * b.size, np.uint8)
        nib[0::2], nib[1::2] = b & 0x0F, b >> 4
        vals = _NF4[nib[:n]]
    else:
        vals = q.codes.astype(np.float32) / np.float32(_QMAX[q.fmt])
    return (vals * scale).astype(np.float32).reshape(q.shape)


def error_report(w: np.ndarray, fmt: str, block: int = 64) -> dict:
    """Measured error of one format on `w`: max abs, RMS, relative Frobenius, and bytes vs f32."""
    w = np.asarray(w, np.float32)
    q = quantize(w, fmt, block)
    d = dequantize(q).astype(np.float64) - w.astype(np.float64)
    fro = float(np.linalg.norm(w.astype(np.float64)))
    return {"format": fmt, "block": block, "max_abs": float(np.abs(d).max(initial=0.0)),
            "rms": float(np.sqrt(np.mean(d * d))) if d.size else 0.0,
            "rel_fro": float(np.linalg.norm(d) / fro) if fro else 0.0,
            "bytes": q.nbytes, "f32_bytes": 4 * w.size}


def compare(w: np.ndarray, formats=FORMATS, block: int = 64) -> list[dict]:
    """error_report for each format, in the given order (a table for the notebook)."""
    return [error_report(w, f, block) for f in formats]
