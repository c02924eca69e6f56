"""Options of a training step that are not the model: precision, activation checkpointing, data placement,
sharded optimizer state, layer relay, adapters. Why apart: the spec, the planner's fixes and the run all
read and change them without building a step."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..catalog import make
from ..errors import ScellisError, did_you_mean


PRECISIONS = ("fp32", "mixed-f16")


CHECKPOINTING = ("none", "activations")


DATA_PLACEMENTS = ("stream", "device")


@dataclass(frozen=True)
class StepOptions:
    checkpointing: str = "none"
    segment: int | None = None     # nodes per recomputed segment (None: about sqrt of the node count)
    precision: str = "fp32"
    shard: tuple = (0, 1)          # (rank, world): optimizer state and update of this rank's parameters
    relay: tuple = (0, 1)          # (stage, stages): this stage's layers only
    peft: tuple | None = None      # sorted (key, value) items of a [recipe.peft] table: method, rank, ...
    guard: bool = True             # skip (and report) an update whose gradients are not finite
    accum: int = 1                 # micro-batches per update (gradient accumulation), one at a time in memory
    ema: bool = False              # keep an exponential moving average of the weights (rate: a step input)
    swa: bool = False              # keep a stochastic weight average (weight of the new sample: a step input)
    data: str = "stream"           # "stream": each batch is uploaded; "device": the dataset stays on the device

    def __post_init__(self):
        if self.checkpointing not in CHECKPOINTING:
            raise ScellisError(f"checkpointing {self.checkpointing!r} is not one of {CHECKPOINTING}",
                               code="plan", where="recipe.checkpointing",
                               hint=did_you_mean(self.checkpointing, CHECKPOINTING))
        if self.precision not in PRECISIONS:
            raise ScellisError(f"precision {self.precision!r} has no training-step lowering",
                               code="plan", where="recipe.precision",
                               hint=did_you_mean(self.precision, PRECISIONS) or f"use one of {PRECISIONS}")
        if not isinstance(self.accum, int) or self.accum < 1:
            raise ScellisError(f"grad_accum_steps must be a positive integer, got {self.accum!r}", code="plan",
                               where="recipe.grad_accum_steps")
        if self.data not in DATA_PLACEMENTS:
            raise ScellisError(f"data placement {self.data!r} is not one of {DATA_PLACEMENTS}", code="plan",
                               where="data.placement", hint=did_you_mean(self.data, DATA_PLACEMENTS))
        for name, (r, w) in (("shard", self.shard), ("relay", self.relay)):
            if not (0 <= r < w):
                raise ScellisError(f"{name}={(r, w)} needs 0 <= index < count", code="plan", where=name)

    @classmethod
    def from_recipe(cls, recipe: dict) -> "StepOptions":
        prec = recipe.get("precision") or "fp32"
        peft = recipe.get("peft")
        return cls(checkpointing=recipe.get("checkpointing") or "none", precision=prec,
                   accum=int(recipe.get("grad_accum_steps") or 1), ema=recipe.get("ema") is not None,
                   swa=recipe.get("swa_start") is not None, peft=_peft_items(peft) if peft else None)

    @classmethod
    def from_description(cls, d: dict) -> "StepOptions":
        """The options `describe()` wrote (a run record's JSON) back as StepOptions."""
        d = dict(d, shard=tuple(d["shard"]), relay=tuple(d["relay"]))
        d["peft"] = _peft_items(d["peft"]) if d.get("peft") else None
        return cls(**d)

    @classmethod
    def from_spec(cls, spec) -> "StepOptions":
        """The recipe's options plus the [data] table's placement."""
        return replace(cls.from_recipe(spec.recipe), data=(spec.data or {}).get("placement") or "stream")

    def adaptation(self, graph):
        """The PEFT entry's Adaptation of `graph`, or None without adapters."""
        if not self.peft:
            return None
        cfg = dict(self.peft)
        method = cfg.pop("method", None) or cfg.pop("name", None)
        if method is None:
            raise ScellisError("[recipe.peft] needs a method", code="spec", where="recipe.peft",
                               hint='e.g. peft = { method = "lora", rank = 8 }')
        return make("peft", method, **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}).apply(graph)

    def describe(self) -> dict:
        return {"checkpointing": self.checkpointing, "segment": self.segment, "precision": self.precision,
                "shard": list(self.shard), "relay": list(self.relay), "peft": dict(self.peft) if self.peft else None,
                "accum": self.accum, "ema": self.ema, "swa": self.swa, "data": self.data}


def _peft_items(peft: dict) -> tuple:
    """A [recipe.peft] table as sorted, hashable items (lists as tuples): StepOptions is frozen and hashed."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in peft.items()))


def with_options(options: StepOptions | None, **changes) -> StepOptions:
    return replace(options or StepOptions(), **changes)
