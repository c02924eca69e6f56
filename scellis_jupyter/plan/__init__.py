"""The Plan stage: liveness over the training step -> peak, breakdown, verdict, fixes (DESIGN.md)."""
from .measure import measure_step
from .plan import Fix, Plan, PlanError, plan

__all__ = ["plan", "Plan", "Fix", "PlanError", "measure_step"]
