"""The Plan stage: liveness over the training step -> peak, breakdown, verdict, fixes (DESIGN.md)."""
from .plan import Fix, Plan, PlanError, plan

__all__ = ["plan", "Plan", "Fix", "PlanError"]
