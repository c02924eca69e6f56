"""The README's quickstart trains and the loss falls (on the reference device here; CI's wgpu run is slow)."""
import re


def test_quickstart_loss_falls(run_python):
    r = run_python(None, module="scellis_jupyter.quickstart", SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("device: reference:numpy")
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", r.stdout)]
    assert len(losses) >= 3 and losses == sorted(losses, reverse=True) and losses[-1] < 0.5 * losses[0]
    assert "loss fell from" in r.stdout and "(tier debug)" in r.stdout
