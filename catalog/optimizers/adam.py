"""Adam (Kingma & Ba, 2015) with torch.optim.Adam's semantics, so float64 runs match PyTorch.

Why torch's form: weight_decay is L2 added to the gradient (not decoupled: that is AdamW), the bias
corrections divide the step size and sqrt(v) as torch does, and AMSGrad keeps the running max of v
(the shared AdamFamily update).
"""
from __future__ import annotations

from scellis_jupyter.catalog import Param, optimizer
from scellis_jupyter.catalog.optimizers import AdamFamily, adam_params
from scellis_jupyter.graph import functional as F


@optimizer("adam", summary="Adam (Kingma & Ba 2015), torch.optim.Adam semantics; L2 weight decay",
           params=adam_params(Param(float, 0.0, lo=0.0, doc="L2 penalty added to the gradient")))
class Adam(AdamFamily):
    def decay(self, x, g, lr):
        return x, F.add(g, F.mul(x, self.weight_decay))
