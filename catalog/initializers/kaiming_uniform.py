"""Kaiming/He uniform (He et al. 2015): U(-b, b), b = sqrt(3) * gain / sqrt(fan);
torch.nn.init.kaiming_uniform_."""
from __future__ import annotations

from scellis_jupyter.catalog import initializer
from scellis_jupyter.catalog.initializers import KAIMING_PARAMS, Kaiming


@initializer("kaiming_uniform", summary="Kaiming/He uniform, U(-b, b), b = sqrt(3) * gain / sqrt(fan)",
             params=KAIMING_PARAMS)
class KaimingUniform(Kaiming):
    name, law = "kaiming_uniform", "uniform"
