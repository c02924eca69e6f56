"""The loop reads (and uploads) the next step's batch while the current step runs (Run._read_ahead): the
batches, their order and epochs, every loss and a resume from a checkpoint taken with a batch read ahead
are exactly those of a loop that reads each batch when its step starts. Compared bit for bit (tier debug).
"""
from __future__ import annotations

import numpy as np
import pytest

from scellis_jupyter.run.run import Run

from fixtures import spec_text
from fixtures.devices import WG, needs_wgpu

SHORT = spec_text("digits_mlp").replace("epochs = 30", "epochs = 3")


def _plain_losses(run: Run, steps: int) -> tuple[list[float], list[np.ndarray], list[int]]:
    """The loop without the read-ahead: each batch read from the loader as its step starts."""
    losses, xs, epochs = [], [], []
    epoch = 0
    while len(losses) < steps:
        for x, y in run.loader:
            run.epoch = epoch
            xs.append(np.array(x))
            epochs.append(epoch)
            losses.append(run._one_step(x, y).loss)
            if len(losses) == steps:
                break
        else:
            epoch += 1
    return losses, xs, epochs


def test_the_loop_reads_the_next_batch_before_the_step_waits_for_its_loss():
    run = Run(SHORT, device="reference", steps=5)
    seen = []
    real = run.impl.read_many
    run.impl.read_many = lambda s: (seen.append(run._ahead is not None), real(s))[1]
    list(run)
    # one readback a step (then the end-of-run evaluation's); nothing is read past the run's last step
    assert seen[:5] == [True, True, True, True, False]


@needs_wgpu
def test_the_step_is_submitted_before_the_next_batch_is_read(monkeypatch):
    """On a GPU the step's commands go to the device before the host reads the next batch (the read then
    overlaps the step), not at the batch's first upload after the read: no recorded work is left unsubmitted
    when the read-ahead draws. The losses are the plain loop's."""
    run = Run(SHORT, device=WG, steps=4)
    be, open_at_draw = run.impl, []
    real_draw = run._draw
    monkeypatch.setattr(run, "_draw", lambda: (open_at_draw.append(be._pass is not None), real_draw())[1])
    monkeypatch.setattr(be, "flush_after", 1e9)      # no submit at a program's end: only where the loop asks
    got = [r.loss for r in run]
    assert open_at_draw == [False, False, False, False]   # the first batch, then one read ahead a later step
    want, _, _ = _plain_losses(Run(SHORT, device=WG, steps=4), 4)
    assert got == want


def test_the_next_steps_count_is_written_with_the_read_ahead():
    """The `step` input (AdamW's bias correction) of the next step is written during the read-ahead, while
    the current step runs, not between the loss read and the next submit; the losses are the plain loop's,
    and a caller's own step on another batch meanwhile still gets its own count."""
    run = Run(SHORT, device="reference", steps=5)
    written, inside = [], [False]
    real_input, real_ahead = run._input, run._read_ahead

    def read_ahead():
        inside[0] = True
        try:
            real_ahead()
        finally:
            inside[0] = False
    run._read_ahead = read_ahead
    run._input = lambda name, a, dtype: (written.append((name, np.asarray(a).reshape(-1)[0], inside[0])),
                                         real_input(name, a, dtype))[1]
    got = [r.loss for r in run]
    steps = [(int(v), ahead) for name, v, ahead in written if name == "step"]
    # step 1's count in its own feeds; 2..5 each written by the read-ahead during the step before
    assert steps == [(1, False), (2, True), (3, True), (4, True), (5, True)], steps
    want, _, _ = _plain_losses(Run(SHORT, device="reference", steps=5), 5)
    assert got == want
    x, y = next(iter(Run(SHORT, device="reference").loader))      # another batch (another run's loader)
    run = Run(SHORT, device="reference", steps=5)
    it = iter(run)
    next(it)                                      # a batch and step 2's count are now read ahead
    mine = run._one_step(x, y)                    # the caller's own step 2, on its own batch
    rest = [r.loss for r in it]                   # steps 3..5: the loop's batches 2, 3, 4
    twin = Run(SHORT, device="reference", steps=5)
    b = iter(twin.loader)
    b1, b2, b3, b4 = next(b), next(b), next(b), next(b)
    want = [twin._one_step(*xy).loss for xy in (b1, (x, y), b2, b3, b4)]     # no read-ahead at all
    assert [mine.loss] + rest == want[1:]


def test_batches_order_epochs_and_losses_are_the_plain_loops():
    run = Run(SHORT, device="reference")
    per_epoch = len(run.loader)
    steps = 2 * per_epoch + 3                          # over two epoch boundaries
    twin = Run(SHORT, device="reference", steps=steps)
    want, xs, epochs = _plain_losses(twin, steps)
    got, got_x = [], []
    run = Run(SHORT, device="reference", steps=steps)
    real = run._one_step
    run._one_step = lambda x, y, **kw: (got_x.append(np.array(x)), real(x, y, **kw))[1]
    results = list(run)
    got = [r.loss for r in results]
    assert got == want
    assert all(np.array_equal(a, b) for a, b in zip(got_x, xs)) and len(got_x) == steps
    assert [r.epoch for r in results] == epochs and epochs[per_epoch - 1] == 0 and epochs[per_epoch] == 1


@pytest.mark.parametrize("at", ["epoch_end", "mid_epoch"])
def test_a_checkpoint_taken_with_a_batch_read_ahead_resumes_exactly(tmp_path, at):
    """User code checkpoints between steps while the next batch is already read (at an epoch's last step
    that batch opens the next epoch and drew its shuffle); the resumed run continues the whole run's curve."""
    probe = Run(SHORT, device="reference")
    per_epoch = len(probe.loader)
    total = 2 * per_epoch + 2
    stop = per_epoch if at == "epoch_end" else per_epoch // 2
    full = Run(SHORT, device="reference", steps=total)
    whole = [s.loss for s in full]
    store = str(tmp_path / "store")
    run = Run(SHORT, device="reference", store=store, steps=total)
    for s in run:
        if s.step == stop:
            assert run._ahead is not None and run._ahead[2] == (1 if at == "epoch_end" else 0)
            h = run.checkpoint()
            break
    ck = run.store.load_checkpoint(h)
    assert ck.extra["loader"]["position"] == stop and ck.epoch == 0
    again = Run(SHORT, device="reference", store=store, steps=total, resume=h)
    rest = [s.loss for s in again]
    assert len(rest) == total - stop and rest == whole[stop:]
    assert all(np.array_equal(v, again.weights()[k]) for k, v in full.weights().items())


@needs_wgpu
def test_on_wgpu_the_early_upload_lands_after_the_step_that_reads_the_buffer():
    """The next batch is written into the step's own input buffers while that step is queued: every loss
    equals the plain loop's, bit for bit, and each write of the next x comes before the step's readback."""
    steps = 6
    want, _, _ = _plain_losses(Run(SHORT, device=WG, steps=steps), steps)
    run = Run(SHORT, device=WG, steps=steps)
    log = []
    real_w, real_r = run.impl.write, run.impl.read_many
    x_store = {}

    def write(s, a):
        if s is x_store.get("x"):
            log.append("x")
        return real_w(s, a)
    run.impl.write = write
    run.impl.read_many = lambda ss: (log.append("read"), real_r(ss))[1]
    got = []
    for r in run:
        x_store["x"] = run._inputs.get("x")
        got.append(r.loss)
    assert got == want
    reads = [i for i, e in enumerate(log) if e == "read"][:steps]      # the steps' (then the evaluation's)
    # from the second step on, the next batch's x is written between a step's submit and its loss read,
    # and no step but those writes it
    assert all(log[i - 1] == "x" for i in reads[1:-1]) and log[:reads[-1]].count("x") == steps - 2, log


def test_a_step_on_another_batch_meanwhile_does_not_feed_the_read_ahead_stale_inputs():
    """A caller's own `_one_step` between loop steps (as the profiler and LR finder drive one) writes the
    step's input storages: the batch read ahead is uploaded again when the loop takes it, so every step
    computes on the very batch it was handed."""
    run = Run(SHORT, device="reference", steps=5)
    real = run._feeds
    fed = []

    def feeds(x, y, lr, ready=None):
        leaves = real(x, y, lr, ready)
        held = run._inputs["x"]
        fed.append(np.array_equal(run.impl.to_numpy(held), np.asarray(x, np.float32).reshape(held.shape)))
        return leaves
    run._feeds = feeds
    other = next(iter(Run(SHORT, device="reference", steps=1).loader))
    for r in run:
        if r.step == 2:
            assert run._ahead is not None and run._ahead[3]      # the next batch is uploaded already
            run._one_step(*other)                                # then overwritten by this step's
    assert len(fed) == 5 and all(fed), fed           # the extra step counts: 4 of the loop, 1 of ours


def test_a_users_own_stream_drawn_between_steps_is_kept_by_the_checkpoint(tmp_path):
    """Only the read-ahead's own draws (the next batch's shuffle) are taken back from the checkpoint's
    positions: a stream user code drew from between two steps keeps its new position."""
    probe = Run(SHORT, device="reference")
    per_epoch = len(probe.loader)
    run = Run(SHORT, device="reference", store=str(tmp_path / "store"), steps=per_epoch + 3)
    for s in run:
        if s.step == per_epoch:                        # the read-ahead drew the next epoch's shuffle
            run.gen.stream("mine").uniform((5,))
            shuffle_now = run.gen.positions["shuffle"]
            h = run.checkpoint()
            break
    pos = run.store.load_checkpoint(h).rng_state["positions"]
    assert pos["mine"] == run.gen.positions["mine"] > 0
    assert pos["shuffle"] < shuffle_now                   # before the read-ahead's draw of the next order
