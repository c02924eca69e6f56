"""The run lifecycle from Python: sc.train / sc.resume / sc.runs, the store rule, progress events and the
clean interrupt (a signal checkpoints at the next step boundary; resume continues bit for bit).

Exactness is compared with == on every loss and the weights hash (tier debug, reference device).
"""
from __future__ import annotations

import json
import os
import signal

import pytest

import scellis_jupyter as sc
from scellis_jupyter.cli import main
from scellis_jupyter.store import Store
from scellis_jupyter.run.lifecycle import format_event, read_events, result_of_record
from scellis_jupyter.run.run import RunError

from fixtures import spec_text

SPEC = spec_text("digits_tiny")


def test_store_rule_is_the_same_in_python_and_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCELLIS_STORE", raising=False)
    a = sc.train(SPEC, steps=2, device="reference", progress=False)            # ./.scellis beside the notebook
    assert (tmp_path / ".scellis" / "index.sqlite").exists()
    assert [r.id for r in sc.runs()] == [a.run_id]
    monkeypatch.setenv("SCELLIS_STORE", str(tmp_path / "env"))
    b = sc.train(SPEC, steps=2, device="reference", progress=False)            # $SCELLIS_STORE
    assert [r.id for r in sc.runs()] == [b.run_id]
    c = sc.train(SPEC, steps=2, device="reference", progress=False, store=tmp_path / "given")   # explicit wins
    assert [r.id for r in sc.runs(tmp_path / "given")] == [c.run_id]
    assert main(["runs", "--json"]) == 0                                        # the CLI follows the same rule
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == [b.run_id]
    monkeypatch.delenv("SCELLIS_STORE")
    assert main(["runs", "--json"]) == 0
    assert [r["run"] for r in json.loads(capsys.readouterr().out)] == [a.run_id]


def test_progress_events_reach_the_callback_and_the_store(tmp_path):
    seen = []
    run = sc.train(SPEC, steps=25, device="reference", progress=seen.append, store=tmp_path / "s")
    kinds = [e["event"] for e in seen]
    assert kinds[0] == "start" and kinds[-1] == "end" and set(kinds[1:-1]) == {"step"}
    steps = [e["step"] for e in seen if e["event"] == "step"]
    assert steps == [3, 6, 9, 12, 15, 18, 21, 22, 24, 25]         # every ceil(25/10) steps, the evaluation, the end
    assert seen[0]["total_steps"] == 25 and seen[0]["steps_per_epoch"] == 22 and seen[0]["plan"] in ("green", "yellow")
    assert [e["loss"] for e in seen if e["event"] == "step"] == [run.loss_history[s - 1] for s in steps]
    assert "accuracy" in next(e for e in seen if e.get("step") == 22 and e["event"] == "step")["metrics"]
    assert seen[-1]["state"] == "finished" and seen[-1]["weights_hash"] == run.weights_hash()
    on_disk, _ = read_events(Store.open(tmp_path / "s").root / "logs" / f"{run.run_id}.events.jsonl")
    assert on_disk == seen                                         # what other processes follow
    line = format_event(seen[8])
    assert line.startswith("step 22/25  epoch 1") and "val accuracy" in line


def test_a_tiny_loss_is_never_printed_as_zero():
    """4.7e-7 is not 0.0000: progress lines and the summary keep small values' digits; usual ones read as before."""
    from scellis_jupyter.run.lifecycle import summary_lines
    line = format_event({"event": "step", "step": 660, "total_steps": 660, "epoch": 29, "loss": 4.7e-7, "lr": 1e-8,
                         "metrics": {"accuracy": 0.9889, "loss": 3.2e-6}})
    assert "loss 4.700e-07" in line and "val loss 3.200e-06" in line and "val accuracy 0.9889" in line, line
    assert "0.0000" not in line
    r = {"state": "finished", "run": "run-x", "steps": 660, "device": {"backend": "reference", "name": "numpy"},
         "tier": "debug", "metrics": {"loss": 4.7e-7, "test_accuracy": 1.0, "zero": 0.0}}
    text = "\n".join(summary_lines(r))
    assert "loss 4.700e-07" in text and "test_accuracy 1.0000" in text and "  zero 0\n" in text, text


def test_read_events_waits_for_complete_lines(tmp_path):
    p = tmp_path / "e.jsonl"
    p.write_text('{"event": "start"}\n{"event": "st')
    evs, off = read_events(p)
    assert evs == [{"event": "start"}] and off == len('{"event": "start"}\n')
    with open(p, "a") as f:
        f.write('ep", "step": 1}\nnot json\n')
    evs, off2 = read_events(p, off)
    assert evs == [{"event": "step", "step": 1}] and off2 == p.stat().st_size
    assert read_events(tmp_path / "none.jsonl", 7) == ([], 7)


def test_a_signal_checkpoints_and_interrupts_then_resume_is_exact(tmp_path):
    whole = sc.train(SPEC, steps=30, device="reference", progress=False, store=tmp_path / "w")

    def on_event(ev):
        if ev["event"] == "step" and ev["step"] == 12:
            os.kill(os.getpid(), signal.SIGINT)           # Ctrl-C in the notebook / terminal
    st = tmp_path / "s"
    cut = sc.train(SPEC, steps=30, device="reference", progress=on_event, store=st)
    assert cut.state == "interrupted" and cut.step == 12
    rec = sc.runs(st)[0]
    assert rec.state == "interrupted" and rec.error["message"] == "stopped by SIGINT"
    assert Store.open(st).load_checkpoint(rec.last_checkpoint).step == 12 and "resume" in rec.resume_hint
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler        # handlers given back
    rest = sc.resume(cut.run_id, store=st, progress=False)   # to the interrupted run's own target: 30 steps
    assert rest.step == 30 and rest.loss_history == whole.loss_history
    assert rest.weights_hash() == whole.weights_hash()
    old, new = (next(r for r in sc.runs(st) if r.id == i) for i in (cut.run_id, rest.run_id))
    assert old.resumed_by == rest.run_id and old.resume_hint == f"resumed as {rest.run_id}"
    assert new.extra["resumed_from"] == rec.last_checkpoint and new.extra["resumed_from_run"] == cut.run_id
    r = result_of_record(new)                                 # the record says what Run.result() says
    for k in ("run", "state", "steps", "final_checkpoint", "weights_hash", "metrics", "loss_history",
              "measured_peak_bytes", "predicted_peak_bytes", "device", "tier"):
        assert r[k] == rest.result()[k], k


def test_resume_refuses_nothing_to_do_and_detach_refuses_python_objects(tmp_path):
    run = sc.train(SPEC, steps=4, device="reference", progress=False, store=tmp_path / "s")
    with pytest.raises(RunError) as e:
        sc.resume(run.run_id, store=tmp_path / "s", steps=4, progress=False)
    assert "already at step 4" in e.value.diagnostic.message and "--steps 8" in e.value.diagnostic.hint
    past = sc.train(SPEC, steps=run.horizon + 3, device="reference", progress=False, store=tmp_path / "s")
    with pytest.raises(RunError) as e:                       # no --steps: the run's target, reached, is named
        sc.resume(past.run_id, store=tmp_path / "s", progress=False)
    msg = e.value.diagnostic.message
    assert f"already at step {run.horizon + 3}" in msg and f"the run's target ({run.horizon + 3} steps)" in msg, msg
    assert f"step {run.horizon}" not in msg                  # not the recipe's horizon
    with pytest.raises(RunError) as e:
        sc.train(SPEC, store=tmp_path / "s", detach=True, options=object())
    assert "options=" in e.value.diagnostic.message and "steps" in e.value.diagnostic.hint
    with pytest.raises(sc.ScellisError) as e:
        sc.resume("run-nope", store=tmp_path / "s")
    assert e.value.diagnostic.code == "run-unknown"
