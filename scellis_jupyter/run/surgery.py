"""Model surgery on a params dict (name -> numpy array) and a PEFT Adaptation.

Why host-side: freezing, adding adapter weights, encoding QLoRA's NF4 leaves and merging LoRA back are
one-off edits of a checkpoint, not training-step kernels. Adapter initial values come from the catalog's
initializer entries drawn from the Philox `init` stream, so the same seed gives the same adapters on
every machine.
"""
from __future__ import annotations

import numpy as np

from ..catalog import CatalogError, make
from ..catalog.peft import Adaptation, match
from ..graph.quantize import QuantizedTensor, dequantize


def freeze(adaptation: Adaptation, names_or_globs) -> set:
    """Remove matching base names from `adaptation.trainable`; returns the names frozen."""
    hit = set(match(sorted(adaptation.trainable), names_or_globs))
    adaptation.trainable -= hit
    return hit


def unfreeze(adaptation: Adaptation, params: dict, names_or_globs) -> set:
    """Add matching base names (keys of `params`) to `adaptation.trainable`; NF4-stored ones are refused."""
    hit = set(match(sorted(params), names_or_globs))
    if not hit:
        raise CatalogError(f"no parameter matches {names_or_globs!r}", where="unfreeze",
                           hint=f"parameters are: {', '.join(sorted(params)[:6])}")
    stored = sorted(hit & set(adaptation.stored))
    if stored:
        raise CatalogError(f"{stored[0]!r} is stored as {adaptation.stored[stored[0]].fmt} and cannot train",
                           where="unfreeze", hint="keep it frozen, or use lora instead of qlora")
    adaptation.trainable |= hit
    return hit


def insert_adapters(params: dict, adaptation: Adaptation, generator) -> dict:
    """params plus an initial array for every adapter parameter (catalog initializer, `init` stream)."""
    out = dict(params)
    stream = generator.stream("init")
    for p in adaptation.new_params:
        if p.name in out:
            raise CatalogError(f"adapter {p.name!r} already exists in params", where="insert_adapters")
        init = make("initializer", p.init)
        out[p.name] = np.asarray(init(tuple(p.shape), p.fan_in, p.fan_out, stream, name=p.name), np.float32)
    return out


def encode_stored(params: dict, adaptation: Adaptation) -> dict:
    """Replace every stored base weight by its leaves (`<name>.<suffix>`, e.g. QLoRA's codes and absmax)."""
    out = dict(params)
    for name, st in adaptation.stored.items():
        if name not in out:
            raise CatalogError(f"stored weight {name!r} is not in params", where="encode_stored")
        for suffix, arr in st.encode(np.asarray(out.pop(name), np.float32)).items():
            out[f"{name}.{suffix}"] = arr
    return out


def merge_lora(params: dict, adaptation: Adaptation, shapes: dict | None = None) -> dict:
    """W + scale · B · A folded into each LoRA target; A and B removed. QLoRA: merged into the dequantized
    weight (the result is f32; re-quantizing it would lose the update's precision). `shapes` gives the
    base weight shapes of stored weights (name -> shape; default: A/B's (out, in))."""
    pairs = adaptation.info.get("lora")
    if not pairs:
        raise CatalogError("this adaptation has no LoRA weights to merge", where="merge_lora",
                           hint="merge_lora applies to lora and qlora adaptations")
    out = dict(params)
    for w, (a, b, scale) in pairs.items():
        A, B = np.asarray(out.pop(a), np.float64), np.asarray(out.pop(b), np.float64)
        if w in adaptation.stored:
            shape = tuple((shapes or {}).get(w, (B.shape[0], A.shape[1])))
            q = QuantizedTensor("nf4", shape, int(adaptation.info.get("block", 64)),
                                np.asarray(out.pop(f"{w}.codes")), np.asarray(out.pop(f"{w}.absmax")))
            base = dequantize(q)
        else:
            base = np.asarray(out[w])
        out[w] = (base.astype(np.float64) + scale * (B @ A)).astype(np.float32)
    return out
