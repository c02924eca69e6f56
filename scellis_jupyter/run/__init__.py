"""Training: the step-driven run loops (one model: `Run`; two networks, adversarially: `GANRun`) and their
lifecycle (`train` / `resume` to the end, or `prepare_resume` for a loop you drive yourself)."""
from .gan import GANRun, GANStep
from .lifecycle import prepare_resume, resume, run_class, train
from .run import Run, RunError, StepResult

__all__ = ["Run", "StepResult", "RunError", "GANRun", "GANStep", "train", "resume", "prepare_resume", "run_class"]
