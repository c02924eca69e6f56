"""Kaiming/He normal (He et al. 2015): N(0, std^2), std = gain / sqrt(fan); torch.nn.init.kaiming_normal_."""
from __future__ import annotations

from scellis_jupyter.catalog import initializer
from scellis_jupyter.catalog.initializers import KAIMING_PARAMS, Kaiming


@initializer("kaiming_normal", summary="Kaiming/He normal, N(0, std^2), std = gain / sqrt(fan)",
             params=KAIMING_PARAMS)
class KaimingNormal(Kaiming):
    name, law = "kaiming_normal", "normal"
