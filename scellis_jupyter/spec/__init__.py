"""The spec language: one TOML text for data, model, recipe and plan, checked with line:col diagnostics."""
from ..data.info import DatasetInfo, dataset_info
from .layers import LAYERS, Layer, LayerCtx, ParamDecl
from .locate import Locator
from .model import ModelGraph, ModelSpec, NodeSpec, build_graph
from .schema import KNOWN, SpecError
from .spec import Spec

__all__ = ["Spec", "SpecError", "KNOWN", "LAYERS", "Layer", "LayerCtx", "ParamDecl", "ModelSpec", "NodeSpec",
           "ModelGraph", "build_graph", "DatasetInfo", "dataset_info", "Locator"]
