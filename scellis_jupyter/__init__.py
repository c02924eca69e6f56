"""Scellis for Jupyter: plan, train, checkpoint and reproduce models on any GPU through WebGPU.

Public surface: `sc.device`, `sc.tensor`, `sc.ops`, `sc.rng`, determinism tiers, `sc.Spec`, `sc.plan`,
and the run lifecycle: `sc.Run` (`sc.GANRun` for kind = "gan"), `sc.train`, `sc.resume`, `sc.runs`, `sc.verify`, `sc.Detached` (what
`sc.train(spec, detach=True)` returns). Runs are recorded in the store: `--store DIR` / `store=`, else
$SCELLIS_STORE, else `.scellis/` in the current directory.
"""
from __future__ import annotations

from ._version import __version__

from . import conformance, ops, rng
from .backends.device import Device, device, devices
from .determinism import TIERS, set_tier, tier
from .errors import (CatalogError, CorruptObject, DataError, DeviceError, Diagnostic, DTypeError, GraphError,
                     KernelError, DeviceGone, LRFinderError, PlanError, PlanRefused, QuantizeError, RunError, ScellisError,
                     ShapeError, SpecError, StoreError, TargetError, TierError, UsageError, VerifyError, WaitTimeout,
                     MagicError, EditError, NotebookError, WidgetError, SettingError)
from .tensor import Tensor, tensor
from .plan import Plan, plan
from .spec import Spec
from .run.detach import Detached
from .run.lifecycle import resume, runs, train
from .run.gan import GANRun, GANStep
from .run.run import Run, StepResult
from .run.verify import verify
from .errors import LedgerError, PoolError, PoolUnreachable, RejectedResult
from .errors import ShardRefused, TrustRefused
from .pool import Job, JobResult, Ledger, Pool, Shard
from .errors import FederatedError, ModelVersionMismatch, PrivacyBudgetExceeded, SecureAggregationError, SiteUnavailable
from .federated import Federation, Privacy, PrivacyLedger, RoundMonitor, RoundResult
from .errors import ProfileError
from .run.profile import profile_run, profile_spec



def profile(target, **kw):
    """A flame-style view of one measured training step of a spec or a run (a notebook widget: layer, op,
    kernel and dispatch rows over GPU time, with the top kernels): jupyter.widgets.ProfileView.of."""
    from .jupyter.widgets.profile_view import ProfileView   # optional: anywidget, only inside a kernel
    return ProfileView.of(target, **kw)


def explain(target, **kw):
    """The stage explorer of a spec's training step (a notebook widget: spec, graph, the schedule of kernels
    forward / backward / update, the arena plan over it, each kernel's WGSL): jupyter.widgets.StageExplorer.of.
    The data alone: plan.explain.explain(spec)."""
    from .jupyter.widgets.stage_explorer import StageExplorer   # optional: anywidget, only inside a kernel
    return StageExplorer.of(target, **kw)


def load_ipython_extension(ip) -> None:
    """`%load_ext scellis_jupyter`: the %%scellis / %scellis magics (scellis_jupyter/jupyter/magics.py)."""
    from .jupyter.magics import load_ipython_extension as load     # optional: IPython, only inside a kernel
    load(ip)


def unload_ipython_extension(ip) -> None:
    """`%unload_ext scellis_jupyter`."""
    from .jupyter.magics import unload_ipython_extension as unload  # optional: IPython, only inside a kernel
    unload(ip)


__all__ = ["Device", "device", "devices", "tensor", "Tensor", "ops", "rng", "set_tier", "tier", "TIERS",
           "ScellisError", "Diagnostic", "UsageError", "SpecError", "CatalogError", "TargetError", "DataError",
           "GraphError", "ShapeError", "DTypeError", "QuantizeError", "TierError", "DeviceError", "KernelError", "DeviceGone",
           "PlanError", "PlanRefused", "RunError", "WaitTimeout", "LRFinderError", "VerifyError", "StoreError",
           "CorruptObject", "MagicError", "SettingError", "EditError", "NotebookError", "WidgetError", "Spec", "plan", "Plan", "Run", "StepResult", "GANRun", "GANStep", "train", "resume", "runs",
           "verify", "Detached", "__version__",
           "Pool", "Job", "JobResult", "Shard", "Ledger", "PoolError", "PoolUnreachable", "RejectedResult", "LedgerError",
           "TrustRefused", "ShardRefused",
           "FederatedError", "SiteUnavailable", "ModelVersionMismatch", "PrivacyBudgetExceeded",
           "SecureAggregationError",
           "Federation", "Privacy", "PrivacyLedger", "RoundMonitor", "RoundResult",
           "ProfileError", "profile_spec", "profile_run", "profile", "explain"]
