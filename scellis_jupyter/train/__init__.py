"""Training: the step-driven run loops (one model: `Run`; two networks, adversarially: `GANRun`) and helpers."""
from .gan import GANRun, GANStep, resume_gan
from .run import Run, RunError, StepResult, resume, train

__all__ = ["Run", "StepResult", "RunError", "resume", "train", "GANRun", "GANStep", "resume_gan"]
