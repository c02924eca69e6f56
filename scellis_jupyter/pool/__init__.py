"""Pools (to come): Job -> Shards -> Pool on Dask -> verify -> Reduction -> receipts; a Pool of one is solo.

Stands on `run`; nothing below imports it. See DESIGN.md's Pool stage.
"""
