import "./lib/common.css";
import "./run_panel.css";
import { button, h } from "./lib/cell.js";
import { withFallback } from "./lib/fallback.js";
import { rate, eta, formatDuration, pushSample, fmtValue } from "./lib/eta.js";
import { allowed } from "./lib/run_actions.js";

const LABELS = { stop: "Stop", pause: "Pause", resume: "Resume", checkpoint: "Checkpoint now",
  resume_run: "Resume run" };
const DONE = new Set(["finished", "failed", "interrupted", "refused"]);
// The kernel answers every button with an "ack" message. None within this time: the panel is a saved state
// whose kernel is gone (a reload after a restart), so the run it shows cannot be reached from here.
export const ACK_MS = 4000;
const BUSY = new Set(["busy", "starting", "restarting", "autorestarting"]);
export const UNREACHABLE = "No kernel answered: this panel is a saved state and its run is not reachable from "
  + "this page (its kernel is gone). In a new kernel, %scellis runs lists it and %scellis resume NAME continues it.";

function render({ model, el }) {
  const root = h("div", "sc-w sc-run");
  el.append(root);
  let samples = [];
  let lastState = model.get("state");
  const head = h("div", "sc-row");
  const badge = h("span", "sc-badge sc-state");
  const name = h("span", "sc-title");
  const dev = h("span", "sc-muted sc-device");
  head.append(badge, name, dev);
  const progress = h("div", "sc-progress");
  const fill = h("div", "sc-fill");
  progress.append(fill);
  const stats = h("div", "sc-row sc-stats");
  const note = h("div", "sc-note sc-devnote");
  const reason = h("div", "sc-note sc-reason");
  const buttons = h("div", "sc-row sc-buttons");
  const btn = {};
  let unreachable = false;
  let queued = false;
  let waiting = null;
  function check() {
    // a busy kernel handles widget messages when its cell ends: the action is queued, not lost
    waiting = null;
    const st = model.widget_manager?.kernel?.status;
    if (BUSY.has(st)) { queued = true; waiting = setTimeout(check, ACK_MS); } else { queued = false; unreachable = true; }
    draw();
  }
  function act(a) {
    model.send({ type: "action", action: a });
    clearTimeout(waiting);
    waiting = setTimeout(check, ACK_MS);
  }
  function onMsg(msg) {
    if (msg?.type !== "ack") return;
    clearTimeout(waiting);
    waiting = null;
    if (unreachable || queued) { unreachable = false; queued = false; draw(); }
  }
  model.on("msg:custom", onMsg);
  for (const a of ["stop", "pause", "resume", "checkpoint", "resume_run"]) {
    btn[a] = button(LABELS[a], () => act(a));
    btn[a].dataset.action = a;
    buttons.append(btn[a]);
  }
  const bell = button("Notify me when done", async () => {
    if (typeof Notification === "undefined") { bell.textContent = "Notifications unavailable"; return; }
    const p = await Notification.requestPermission();
    el.dataset.notifyPermission = p;
    bell.textContent = p === "granted" ? "Will notify" : "Notifications blocked";
  }, "a browser notification when this run finishes or fails");
  bell.dataset.role = "notify";
  buttons.append(bell);
  const notice = h("div", "sc-note sc-notice");
  root.append(head, progress, stats, note, reason, buttons, notice);

  function draw() {
    const s = model.get("state");
    const step = model.get("step");
    const total = model.get("total_steps");
    samples = pushSample(samples, model.get("last_time") || Date.now() / 1000, step);
    // this view's own window while it watches a run; else the kernel's last measurement (a reloaded page,
    // a saved notebook, a finished run), so the panel never forgets the speed it saw
    const local = s === "running" ? rate(samples) : null;
    const r = local ?? model.get("steps_per_s");
    const left = local != null ? eta(step, total, local) : model.get("eta_s");
    el.dataset.state = s;
    el.dataset.step = String(step);
    el.dataset.rate = r != null ? String(r) : "";
    badge.textContent = s;
    badge.className = `sc-badge sc-state sc-st-${s}`;
    name.textContent = model.get("name") || model.get("run_id") || "run";
    dev.textContent = `${model.get("device_label")} · tier ${model.get("tier")}`;
    note.textContent = model.get("device_note") || "";
    const frac = total ? Math.min(1, step / total) : 0;
    fill.style.width = `${100 * frac}%`;
    stats.replaceChildren(
      h("span", "sc-steps", `step ${step}${total ? ` / ${total}` : ""}${total ? ` (${(100 * frac).toFixed(0)}%)` : ""}`),
      h("span", "sc-rate", r != null ? `${r.toFixed(r < 10 ? 2 : 0)} steps/s` : "– steps/s"),
      h("span", "sc-eta", s === "finished" ? "done" : (s === "running" || s === "paused") && left != null ? `ETA ${formatDuration(left)}` : ""),
      h("span", "sc-loss sc-muted", model.get("last_loss") != null ? `loss ${fmtValue(model.get("last_loss"))}` : ""));
    reason.textContent = model.get("reason") ? `${s}: ${model.get("reason")}` : "";
    el.dataset.unreachable = String(unreachable);
    for (const [a, b] of Object.entries(btn)) {
      const why = unreachable ? UNREACHABLE : allowed(s, a, model.get("can_resume"));
      b.disabled = !!why;
      b.title = why || "";
      b.hidden = a === "resume_run" ? s !== "interrupted" : false;
    }
    notice.textContent = unreachable ? UNREACHABLE
      : queued ? "The kernel is busy (a cell is running): the action runs when that cell ends."
        : model.get("notice") || "";
    if (model.get("_notified")) el.dataset.notified = model.get("_notified");
    if (typeof Notification !== "undefined" && Notification.permission === "granted") {
      el.dataset.notifyPermission = "granted";
      bell.textContent = "Will notify";
    }
    if (DONE.has(s) && lastState !== s && !DONE.has(lastState) && (s === "finished" || s === "failed")) notify(s);
    lastState = s;
  }

  function notify(s) {
    if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
    try {
      new Notification(`Scellis: ${model.get("name") || "run"} ${s}`, { body: `step ${model.get("step")}` });
      model.set("_notified", s);
    } catch (e) { model.set("_notified", `error: ${e}`); }
    model.save_changes();
  }

  const keys = ["_notified", "state", "step", "total_steps", "reason", "notice", "device_label", "tier", "can_resume", "last_loss", "name",
    "steps_per_s", "eta_s"];
  for (const k of keys) model.on(`change:${k}`, draw);
  draw();
  return () => { clearTimeout(waiting); model.off("msg:custom", onMsg); for (const k of keys) model.off(`change:${k}`, draw); };
}

export default { render: withFallback(render) };
