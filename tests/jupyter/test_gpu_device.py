"""The browser device's comm transport without a page: the messages a page sends (ready, replies, visibility, bye)
played into CommTransport, and what the kernel side makes of them (replies matched by id, a closed or reloaded page
failing what waits as DeviceGone, a second tab ignored, a hidden tab said in the run panel)."""
import threading
import time

import pytest

from scellis_jupyter.backends.wgpu import browser
from scellis_jupyter.errors import DeviceGone
from scellis_jupyter.jupyter.widgets import gpu_device
from scellis_jupyter.jupyter.widgets.gpu_device import CommTransport, GpuDevice
from scellis_jupyter.jupyter.widgets.run_panel import RunPanel

HELLO = {"gpu": True, "info": {"vendor": "google", "architecture": "swiftshader", "adapter_type": "CPU"},
         "features": ["subgroups"], "limits": {"maxBufferSize": 268435456}, "userAgent": "Chrome/156.0"}


class Page:
    """Stands in for the page: records what the kernel sends; `answer` replies as the executor would."""

    def __init__(self, tr: CommTransport, page: str = "p1"):
        self.tr, self.page, self.sent = tr, page, []
        tr.widget.send = lambda content, buffers=None: self.sent.append((content, buffers))

    def ready(self, page=None):
        self.tr._on_msg(None, {"type": "ready", "page": page or self.page, "hello": HELLO}, [])

    def answer(self, reply, buffers=()):
        content, _ = self.sent[-1]
        self.tr._on_msg(None, {"type": "gpu-reply", "id": content["id"], "reply": reply}, list(buffers))


def _transport():
    return CommTransport(GpuDevice())


def _in_thread(fn):
    box = {}

    def go():
        try:
            box["got"] = fn()
        except BaseException as e:            # noqa: BLE001
            box["err"] = e
    th = threading.Thread(target=go)
    th.start()
    return th, box


def _until(pred, s=5.0):
    t0 = time.time()
    while not pred():
        assert time.time() - t0 < s, "timed out"
        time.sleep(0.01)


def test_a_request_waits_for_its_reply_by_id_and_only_the_owner_page_is_asked():
    tr = _transport()
    page = Page(tr)
    page.ready()
    page.ready("p2")                              # a second tab: it watches
    assert tr.page == "p1" and tr.hello["gpu"]
    th, box = _in_thread(lambda: tr.request({"op": "batch", "device": 1, "cmds": []}, [b"abcd"]))
    _until(lambda: page.sent)
    content, bufs = page.sent[-1]
    assert content["type"] == "gpu" and content["page"] == "p1" and bytes(bufs[0]) == b"abcd"
    tr._on_msg(None, {"type": "gpu-reply", "id": "gpu-999", "reply": {"ok": True}}, [])   # not this one's
    time.sleep(0.05)
    assert th.is_alive() and "got" not in box
    page.answer({"ok": True}, [b"\x01\x02"])
    th.join(5)
    assert box["got"] == ({"ok": True}, [b"\x01\x02"])


def test_a_closed_or_reloaded_page_fails_what_waits_as_device_gone():
    tr = _transport()
    page = Page(tr)
    page.ready()
    session = browser._Session(tr, 7)
    th, box = _in_thread(session.flush)
    _until(lambda: page.sent)
    tr._on_msg(None, {"type": "bye", "page": "p1"}, [])
    th.join(5)
    assert isinstance(box.get("err"), DeviceGone), box
    assert "closed or reloaded" in str(box["err"]) and str(box["err"]).startswith("error[device-gone]")
    with pytest.raises(DeviceGone):               # and every later batch of that device, at once
        session.flush()
    gen = tr.generation
    page.ready("p3")                              # the reloaded page owns the work from now on
    assert tr.page == "p3" and tr.generation == gen + 1 and not tr.gone


class _PageRun:
    """A run on the page's device, as a RunPanel sees one (its events are played in by the test)."""
    device_label, tier, name, run_id, state, step, total_steps, started = (
        "wgpu:browser google swiftshader via browser Chrome 156", "debug", "digits", "run-1", "running", 3, 10, 0)

    def subscribe(self, fn):
        return lambda: None


def _panel_on_the_page(monkeypatch) -> tuple:
    tr = _transport()
    Page(tr).ready()
    monkeypatch.setattr(gpu_device, "_CURRENT", [tr])
    return tr, RunPanel(_PageRun())


def test_a_hidden_tab_is_said_in_the_run_panel(monkeypatch):
    tr, panel = _panel_on_the_page(monkeypatch)
    assert "hidden" not in panel.device_note
    tr._on_msg(None, {"type": "visibility", "page": "p1", "state": "hidden", "wake_lock": "held"}, [])
    assert "tab is hidden" in panel.device_note and "throttles" in panel.device_note
    tr._on_msg(None, {"type": "visibility", "page": "p1", "state": "visible", "wake_lock": "held"}, [])
    assert "hidden" not in panel.device_note
    tr._on_msg(None, {"type": "visibility", "page": "p1", "state": "visible", "wake_lock": "refused: NotAllowedError"},
               [])
    assert "could not keep the screen awake" in panel.device_note
    # not ticked: the lock is the user's call, so the panel says what a sleeping screen does and where to tick it
    tr._on_msg(None, {"type": "visibility", "page": "p1", "state": "visible", "wake_lock": "off"}, [])
    assert "keep the screen awake" in panel.device_note and "could not" not in panel.device_note


def test_an_action_on_a_run_whose_page_is_gone_is_refused_with_that_reason(monkeypatch):
    _tr, panel = _panel_on_the_page(monkeypatch)
    panel._on_event({"kind": "state", "state": "interrupted", "step": 3, "reason":
                     "error[device-gone] at device browser: the notebook's page was closed or reloaded: what it held on "
                     "its GPU is gone\n  hint: the run's last checkpoint resumes it, here or on any other device"})
    why = panel.act("pause")
    assert why.startswith("the run is interrupted: nothing to pause (it ended: error[device-gone]"), why
    assert "closed or reloaded" in why and panel.notice == why and "\n" not in why


def test_a_kernel_whose_widget_no_page_shows_is_refused_naming_why_and_the_devices(monkeypatch):
    """nbconvert or a headless kernel: the GpuDevice widget is shown to no page, so no hello ever comes. Asking for
    the browser device is then error[device] naming that and the devices there are, before any compute (here after
    a shortened wait), not a claim that a page went away."""
    import scellis_jupyter as sc
    from scellis_jupyter.errors import DeviceError
    monkeypatch.setattr(gpu_device, "READY_S", 0.3)
    monkeypatch.setattr(browser, "_TRANSPORT", {})
    monkeypatch.setattr(GpuDevice, "send", lambda self, *a, **k: None, raising=False)
    browser.set_transport(gpu_device.comm_transport)
    th, box = _in_thread(lambda: sc.device("browser"))
    th.join(10)
    err = box.get("err")
    assert isinstance(err, DeviceError) and not isinstance(err, DeviceGone), box
    text = str(err)
    assert text.startswith("error[device] at device selection: no page showed the browser device's widget"), text
    assert "nbconvert, a headless kernel" in text and "available here:" in text and "reference" in text
    assert "t" in browser._TRANSPORT and not hasattr(browser._TRANSPORT["t"], "request")   # asked again next time


def test_a_browser_adapter_knows_its_page_is_gone_after_a_bye_or_a_reload():
    """What a paused run asks (Device.gone): the page that said this adapter's hello closed, or another page now
    serves the kernel; a new adapter of the reloaded page is not gone."""
    from scellis_jupyter.backends.device import Device
    tr = _transport()
    page = Page(tr)
    page.ready()
    dev = Device("wgpu", "browser google swiftshader", "CPU", {}, 0, "declared", implementation="browser",
                 _adapter=browser.Adapter(tr, HELLO))
    assert dev.gone() == ""
    tr._on_msg(None, {"type": "bye", "page": "p2"}, [])            # another tab's bye: not this page
    assert dev.gone() == ""
    tr._on_msg(None, {"type": "bye", "page": "p1"}, [])
    assert "closed or reloaded" in dev.gone()
    page.ready("p3")
    assert "closed or reloaded" in dev.gone()                       # still the old page's device
    assert browser.Adapter(tr, HELLO).gone() == ""
    assert Device("wgpu", "x", "CPU", {}, 0, "declared").gone() == ""   # other devices never go
