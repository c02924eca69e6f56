"""Federated learning as a Pool configuration: sites are the pool's workers and keep their data; rounds of a
catalog strategy (FedAvg, FedProx, SCAFFOLD, DiLoCo, FedBuff, or a user's); differential privacy with a
budget ledger; secure aggregation. Stands on `pool`.
"""
from __future__ import annotations

from ..catalog.aggregations import Local, Strategy, Update
from .federation import Federation, Protect, RoundResult
from .monitor import RoundMonitor
from .privacy import Privacy, PrivacyLedger

__all__ = ["Federation", "RoundResult", "Protect", "Strategy", "Update", "Local", "Privacy", "PrivacyLedger",
           "RoundMonitor"]
