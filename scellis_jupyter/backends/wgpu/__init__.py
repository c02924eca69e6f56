"""The wgpu backend: WGSL compute shaders from kernels/, dispatched through one pass per program."""
