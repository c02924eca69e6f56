"""Training: the step-driven run loop and its helpers (the LR range finder)."""
