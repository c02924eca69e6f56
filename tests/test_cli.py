"""`scellis` CLI: device as JSON and readable, --version, ScellisError -> diagnostic on stderr + exit 2."""
import json

import scellis_jupyter as sc

FIELDS = {"backend", "name", "adapter_type", "memory_bytes", "memory_source", "limits", "features", "choice"}


def test_device_json_reference(run_python):
    r = run_python(None, "device", "--json", module="scellis_jupyter.cli", SCELLIS_DEVICE="reference")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)                      # stdout is only the JSON; the banner goes to stderr
    assert set(d) == FIELDS | {"settings"}
    assert d["settings"]["SCELLIS_DEVICE"] == "reference"           # the settings in effect, by name
    assert (d["backend"], d["name"], d["adapter_type"]) == ("reference", "numpy", "reference")
    assert d["memory_bytes"] > 0 and d["memory_source"] == "system-ram"
    assert isinstance(d["limits"], dict) and d["features"] == []
    assert "reference" in d["choice"]
    assert "NOT a GPU" in r.stderr


def test_device_readable(run_python):
    r = run_python(None, "device", module="scellis_jupyter.cli", SCELLIS_DEVICE="reference",
                   SCELLIS_DEVICE_MEMORY="1073741824")
    assert r.returncode == 0, r.stderr
    lines = dict(l.split(None, 1) for l in r.stdout.splitlines() if l and not l.startswith(" ") and " " in l)
    assert lines["backend"] == "reference" and lines["memory_source"] == "declared"
    assert lines["memory_bytes"].startswith("1073741824 (1.0 GiB)")
    assert {"backend", "name", "adapter_type", "memory_bytes", "memory_source", "choice", "features"} <= set(lines)
    assert "limits" in r.stdout


def test_device_flag_overrides_env(run_python):
    r = run_python(None, "device", "--json", "--device", "reference", module="scellis_jupyter.cli",
                   SCELLIS_DEVICE="wgpux")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["backend"] == "reference"


def test_unknown_device_exits_2_with_diagnostic(run_python):
    r = run_python(None, "device", "--json", module="scellis_jupyter.cli", SCELLIS_DEVICE="wgpux")
    assert r.returncode == 2
    assert r.stdout == ""
    assert "error[device]" in r.stderr and "'wgpux'" in r.stderr and "reference" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_declared_memory_exits_2(run_python):
    r = run_python(None, "device", module="scellis_jupyter.cli", SCELLIS_DEVICE="reference",
                   SCELLIS_DEVICE_MEMORY="lots")
    assert r.returncode == 2 and "SCELLIS_DEVICE_MEMORY" in r.stderr and "Traceback" not in r.stderr


def test_version(run_python):
    r = run_python(None, "--version", module="scellis_jupyter.cli")
    assert r.returncode == 0 and r.stdout.strip() == f"scellis-jupyter {sc.__version__}"


def test_no_command_is_a_usage_error(run_python):
    r = run_python(None, module="scellis_jupyter.cli")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error[usage] at scellis: the following arguments are required: COMMAND\n  hint: ")
    assert "train" in r.stderr and "Traceback" not in r.stderr


def test_in_process_main_returns_code(capsys, monkeypatch):
    from scellis_jupyter import cli
    monkeypatch.setenv("SCELLIS_DEVICE", "reference")
    assert cli.main(["device", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "reference"
    assert set(cli.COMMANDS) >= {"device"}


# ---- argparse's own errors come out as diagnostics -------------------------------------------------------
import pytest  # noqa: E402


@pytest.mark.parametrize("argv,head,hint", [
    (["train", "s.toml", "--stpes", "3"], "error[usage] at scellis train: unrecognized arguments: --stpes 3",
     "did you mean '--steps'?"),
    (["train", "s.toml", "--memory", "lots"],
     "error[usage] at scellis train: argument --memory: 'lots' is not a positive size", "scellis train --help"),
    (["train"], "error[usage] at scellis train: the following arguments are required: spec", "scellis train --help"),
    (["trian", "s.toml"], "error[usage] at scellis: argument COMMAND: invalid choice: 'trian'",
     "did you mean 'train'?"),
    (["resume", "abc", "--steps", "0"], "error[usage] at scellis resume: argument --steps: '0' is not a positive "
     "integer", "scellis resume --help"),
    (["wait", "run-x", "--timeout", "soon"], "error[usage] at scellis wait: argument --timeout: 'soon' is not a "
     "number of seconds", ""),
])
def test_argparse_errors_are_diagnostics(capsys, argv, head, hint):
    from scellis_jupyter import cli
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(head) and "usage:" not in out.err
    assert "\n  hint: " in out.err and hint in out.err


def test_help_stays_argparse_help(run_python):
    r = run_python(None, "train", "--help", module="scellis_jupyter.cli")
    assert r.returncode == 0 and r.stdout.startswith("usage: scellis train") and "--checkpoint-every K" in r.stdout
    assert r.stderr == ""


# ---- scellis catalog ----------------------------------------------------------------------------------------
def test_catalog_json_and_table(capsys):
    from scellis_jupyter import catalog, cli
    assert cli.main(["catalog", "optimizers", "--json"]) == 0          # the folder name works too
    entries = json.loads(capsys.readouterr().out)
    by = {e["name"]: e for e in entries}
    assert {e["kind"] for e in entries} == {"optimizer"} and "adamw" in by and "sgd" in by
    assert set(by) == {e.name for e in (catalog.get("optimizer", n) for n in by)}
    lr = by["adamw"]["params"]["lr"]
    assert set(lr) >= {"type", "default", "range"} and lr["type"] == "float" and lr["range"]
    assert cli.main(["catalog", "metric"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("metric (") and any(l.split()[:1] == ["accuracy"] for l in text)
    assert any(l.strip().startswith("top_k: int = 1 in [1, inf)") for l in text)
    assert cli.main(["catalog", "--json"]) == 0
    kinds = {e["kind"] for e in json.loads(capsys.readouterr().out)}
    assert {"optimizer", "metric", "scheduler", "initializer"} <= kinds


def test_catalog_unknown_kind(capsys):
    from scellis_jupyter import cli
    assert cli.main(["catalog", "optimzer"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error[catalog] at scellis catalog: unknown catalog kind 'optimzer'")
    assert "did you mean 'optimizer'" in err


def test_every_spec_mistake_is_reported_in_text_order(tmp_path, capsys):
    from scellis_jupyter.cli import main
    f = tmp_path / "two.toml"
    f.write_text('[data]\ndataset = "digits"\n[model]\nnodes = [{ op = "linaer", out = 10 }]\n'
                 '[recipe]\nloss = "cross_entropi"\n')
    assert main(["plan", str(f), "--device", "reference"]) == 2
    err = capsys.readouterr().err.splitlines()
    heads = [l for l in err if l.startswith("error[")]
    assert heads == [f"error[spec] at {f}:4:17: unknown op 'linaer'",
                     f"error[spec] at {f}:6:8: unknown loss 'cross_entropi'"], err
