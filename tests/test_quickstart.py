"""The README's quickstart plans, trains to the digits floor, checkpoints, and the checkpoint resumes."""
import re


def test_quickstart_plans_trains_and_checkpoints(run_python, tmp_path):
    r = run_python(None, "--store", str(tmp_path / "store"), module="scellis_jupyter.quickstart",
                   SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.startswith("device: reference:numpy")
    assert "verdict   YELLOW" in out and "optimizer_state" in out      # the plan, before training
    losses = [float(x) for x in re.findall(r"epoch +\d+ +step +\d+ +loss (\d+\.\d+)", out)]
    assert len(losses) == 30 and losses[-1] < 0.3 * losses[0]
    acc = float(re.search(r"test accuracy (\d\.\d+)", out).group(1))
    assert acc >= 0.97
    m = re.search(r"measured peak (\d+) bytes, planned (\d+)", out)
    assert m.group(1) == m.group(2)
    ck = re.search(r"checkpoint ([0-9a-f]{64}) in", out).group(1)
    from scellis_jupyter.store import Store
    loaded = Store.open(tmp_path / "store").load_checkpoint(ck)
    assert loaded.step == 30 * 22
