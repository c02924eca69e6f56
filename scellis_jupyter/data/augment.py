"""Batch augmentations and weighted sampling as the spec's recipe configures them.

Why on the host, from the `augment` stream: the loader applies each augmentation to a batch as it hands
it out (`Batches(transforms=...)`), drawing from the generator's Philox `augment` sub-stream, whose
position the checkpoint records; a resumed run therefore draws the same noise, shifts and flips. Class
weights become per-example sampling weights (`Batches(weights=...)`), drawn from the `shuffle` stream.

Spec (in [recipe]):
    augment = [{ name = "gaussian_noise", std = 0.05 }, { name = "random_shift", pixels = 1 }, { name = "hflip" }]
    sampling = "balanced"                          # or "uniform" (default), or { class_weights = [1.0, 3.0] }

Augmentations see each example in the model's declared input shape (so a flat 64-feature digit declared
as input [1, 8, 8] is shifted and flipped as an 8x8 image); random_shift and hflip need two spatial axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..catalog.registry import CatalogError, Param
from ..errors import did_you_mean
from .dataset import DataError

SAMPLING = ("uniform", "balanced")


@dataclass(frozen=True)
class Augmentation:
    name: str
    params: dict                 # name -> Param
    spatial: bool                # needs two spatial axes (the last two of the per-example input)
    make: Callable               # make(shape, **params) -> fn(x [B, *shape] float, stream) -> x
    doc: str = ""


def _noise(shape, std=0.05):
    def fn(x, stream):
        return x + (stream.normal(x.shape) * np.float32(std)).astype(x.dtype)
    return fn


def _shift(shape, pixels=1):
    def fn(x, stream):
        b = x.shape[0]
        d = stream.integers(2 * b, 2 * pixels + 1).reshape(b, 2) - pixels      # (dy, dx) in [-pixels, pixels]
        out = np.zeros_like(x)
        h, w = x.shape[-2:]
        for i in range(b):
            dy, dx = int(d[i, 0]), int(d[i, 1])
            ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
            xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
            out[i, ..., yd, xd] = x[i, ..., ys, xs]
        return out
    return fn


def _hflip(shape, prob=0.5):
    def fn(x, stream):
        u = stream.open_uniform(x.shape[0])
        flip = u < prob
        out = x.copy()
        out[flip] = x[flip][..., ::-1]
        return out
    return fn


AUGMENTATIONS: dict[str, Augmentation] = {a.name: a for a in (
    Augmentation("gaussian_noise", {"std": Param(float, 0.05, lo=0.0, doc="standard deviation of the noise")},
                 False, _noise, "adds N(0, std^2) to every input value"),
    Augmentation("random_shift", {"pixels": Param(int, 1, lo=1, hi=64, doc="largest shift per axis")},
                 True, _shift, "moves each image by (dy, dx) uniform in [-pixels, pixels]^2, zeros shifted in"),
    Augmentation("hflip", {"prob": Param(float, 0.5, lo=0.0, hi=1.0, doc="probability of flipping an example")},
                 True, _hflip, "mirrors each image left-right (last axis) with probability prob"),
)}


def check_augmentation(cfg: dict, input_shape: tuple | None = None, input_dtype: str | None = None) -> dict:
    """Validated params of one `{name, **params}` augmentation; CatalogError names the problem (and the
    key it is about in details['key'] so the spec can point at it)."""
    cfg = dict(cfg)
    name = cfg.pop("name", None)
    if name not in AUGMENTATIONS:
        raise CatalogError(f"unknown augmentation {name!r}", hint=did_you_mean(str(name), AUGMENTATIONS)
                           or f"augmentations: {', '.join(AUGMENTATIONS)}", key="name")
    aug = AUGMENTATIONS[name]
    out = {}
    for k, v in cfg.items():
        if k not in aug.params:
            raise CatalogError(f"augmentation {name!r} has no parameter {k!r}", key=k,
                               hint=did_you_mean(k, aug.params) or f"its parameters: {', '.join(aug.params) or 'none'}")
        try:
            out[k] = aug.params[k].validate(k, v, f"augmentation {name!r}")
        except CatalogError as e:
            raise CatalogError(e.diagnostic.message, hint=e.diagnostic.hint, key=k) from None
    if input_dtype is not None and input_dtype not in ("f32", "f16"):
        raise CatalogError(f"augmentation {name!r} needs float inputs, the model's input is {input_dtype}",
                           key="name")
    if aug.spatial and input_shape is not None and len(input_shape) < 2:
        raise CatalogError(f"augmentation {name!r} needs images (two spatial axes), the model's input is "
                           f"{list(input_shape)}", key="name",
                           hint="declare the input as an image, e.g. [model] input = { shape = [1, 8, 8] }")
    if name == "random_shift" and input_shape is not None and len(input_shape) >= 2 \
            and out.get("pixels", 1) >= min(input_shape[-2:]):
        raise CatalogError(f"random_shift pixels={out.get('pixels', 1)} is not smaller than the image "
                           f"{list(input_shape[-2:])}", key="pixels")
    return out


def transforms(configs: list, input_shape: tuple, input_dtype: str = "f32") -> list:
    """Loader transforms `t(x, y, stream) -> (x, y)` for the recipe's `augment` list, in order."""
    out = []
    shape = tuple(input_shape)
    for cfg in configs or []:
        params = check_augmentation(cfg, shape, input_dtype)
        fn = AUGMENTATIONS[cfg["name"]].make(shape, **params)
        out.append(_batched(fn, shape))
    return out


def _batched(fn, shape):
    def t(x, y, stream):
        a = np.asarray(x)
        b = a.reshape((a.shape[0],) + shape)
        return fn(b, stream).reshape(a.shape), y
    t.__name__ = getattr(fn, "__name__", "augment")
    return t


def sampling_weights(sampling, labels: np.ndarray | None, n_classes: int | None = None) -> np.ndarray | None:
    """Per-example sampling weights for the recipe's `sampling` (None for uniform shuffling).

    "balanced": 1 / (examples of that class), so each class is drawn equally often in expectation;
    {class_weights = [...]}: the given weight of each example's class.
    """
    if sampling is None or sampling == "uniform":
        return None
    if labels is None:
        raise DataError(f"sampling {sampling!r} needs class labels and the dataset has none", where="recipe.sampling")
    lab = np.asarray(labels)
    if lab.dtype.kind not in "iu" and not np.all(lab == np.round(lab)):
        raise DataError("class-weighted sampling needs integer class labels", where="recipe.sampling")
    lab = lab.astype(np.int64)
    if sampling == "balanced":
        classes, counts = np.unique(lab, return_counts=True)
        per = dict(zip(classes.tolist(), (1.0 / counts).tolist()))
        return np.array([per[v] for v in lab.tolist()], np.float64)
    cw = np.asarray(sampling["class_weights"], np.float64)
    if lab.size and (lab.min() < 0 or lab.max() >= cw.size):
        raise DataError(f"class_weights has {cw.size} values but a label is {int(lab.max())}",
                        where="recipe.sampling", hint="give one weight per class")
    return cw[lab]


def loader_options(recipe: dict, dataset, indices: np.ndarray, input_shape: tuple, input_dtype: str) -> dict:
    """`Batches` keyword arguments (weights, transforms) for the train split, from the recipe."""
    opts = {}
    samp = recipe.get("sampling")
    if samp not in (None, "uniform"):
        labels = dataset.targets()
        opts["weights"] = sampling_weights(samp, None if labels is None else np.asarray(labels)[indices])
    if recipe.get("augment"):
        opts["transforms"] = transforms(recipe["augment"], input_shape, input_dtype)
    return opts


__all__ = ["AUGMENTATIONS", "Augmentation", "SAMPLING", "check_augmentation", "transforms", "sampling_weights",
           "loader_options"]
