"""Backends: `reference` (numpy oracle) and `wgpu` (WGSL compute shaders); devices pick between them."""
from .device import Device, device, devices

__all__ = ["Device", "device", "devices"]
