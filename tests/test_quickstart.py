"""The README's quickstart plans, trains to the digits floor, checkpoints, and the checkpoint resumes."""
import re


def test_quickstart_plans_trains_and_checkpoints(run_python, tmp_path):
    r = run_python(None, "--store", str(tmp_path / "store"), module="scellis_jupyter.quickstart",
                   SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.startswith("device: reference:numpy")
    assert "verdict   GREEN" in out and "optimizer_state" in out       # the plan, before training: it fits
    assert "  device    the CPU (numpy reference path), not a GPU" in out        # and the device line says the CPU
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


def test_the_quickstarts_resume_hint_works_as_printed(run_python, tmp_path):
    """The finished run's hint is a command that continues it (with --steps past its end), run as printed."""
    import shlex
    store = tmp_path / "store"
    r = run_python(None, "--store", str(store), "--epochs", "2", module="scellis_jupyter.quickstart",
                   SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stdout + r.stderr
    hint = re.search(r"^  continue: +(scellis resume .*)$", r.stdout, re.M).group(1)
    argv = shlex.split(hint)
    assert argv[:2] == ["scellis", "resume"] and "--steps" in argv
    steps = int(argv[argv.index("--steps") + 1])
    assert steps > 2 * 22
    c = run_python(None, *argv[1:], "--json", module="scellis_jupyter.cli", SCELLIS_DEVICE="reference")
    assert c.returncode == 0, c.stdout + c.stderr
    import json
    assert json.loads(c.stdout)["steps"] == steps
