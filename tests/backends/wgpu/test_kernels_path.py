"""kernel_source finds kernels/<name>.wgsl in the package or the source tree, and names what is missing."""
from pathlib import Path

import pytest

from scellis_jupyter.errors import KernelError
from scellis_jupyter.backends.wgpu.kernels_path import kernel_dirs, kernel_source

ROOT = Path(__file__).resolve().parents[3]


def test_finds_a_shipped_kernel():
    files = sorted((p for d in kernel_dirs() for p in d.glob("*.wgsl")), key=lambda p: p.name)
    assert files, "no kernels/*.wgsl found"
    names = [p.stem for p in files]
    src = kernel_source(names[0])
    assert src == files[0].read_text() and src.strip()
    assert kernel_source(names[0] + ".wgsl") == src


def test_missing_kernel_names_the_file():
    with pytest.raises(KernelError, match=r"no_such_kernel\.wgsl") as e:
        kernel_source("no_such_kernel")
    assert e.value.diagnostic.details["file"] == "no_such_kernel.wgsl"


@pytest.mark.parametrize("bad", ["", "../pyproject", "a/b", ".hidden"])
def test_rejects_paths(bad):
    with pytest.raises(KernelError, match="not a kernel family name"):
        kernel_source(bad)


def test_wheel_ships_kernels():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"kernels" = "scellis_jupyter/kernels"' in text
