"""Program: a scheduled, content-hashed graph with its arena plan, compiled once and cached."""
from .schedule import Program, compile_program
from .liveness import ArenaPlan, plan_arena

__all__ = ["Program", "compile_program", "ArenaPlan", "plan_arena"]
