"""What every conformance suite shares: the device a check runs on (the reference path unless asked)."""
from __future__ import annotations

from ..backends.device import Device
from ..backends.device import device as pick


def _device(device) -> Device:
    return device if isinstance(device, Device) else pick(device or "reference")
