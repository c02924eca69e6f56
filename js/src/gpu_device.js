// The `browser` device's widget: the page's navigator.gpu serving the kernel's engine. The executor
// (lib/webgpu_executor.js) answers each kernel message ({id, msg} plus blobs) with {id, reply} plus the bytes it
// read back. It lives with the model (initialize), so a message is answered whether or not the view is shown.
import { createExecutor } from "./lib/webgpu_executor.js";
import { createWakeLock } from "./lib/wake_lock.js";

export { createExecutor };

function initialize({ model }) {
  const ex = createExecutor();
  // one page owns the kernel's GPU work (the first to say hello); another tab on the notebook only watches
  const page = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
  let chain = Promise.resolve();
  model.on("msg:custom", (content, buffers) => {
    if (!content || content.type !== "gpu" || content.page !== page) return;
    // one at a time, in the order sent
    if (!asked) { asked = true; wake.serve().then(visible); }
    chain = chain.then(async () => {
      const { reply, buffers: out } = await ex.handle(content.msg, buffers || []);
      model.send({ type: "gpu-reply", id: content.id, reply }, undefined, out);
    });
  });
  // the kernel sends nothing before this: a message that arrived before the model existed would be lost
  ex.handle({ op: "hello" }).then(({ reply }) => model.send({ type: "ready", page, hello: reply }));
  // the screen kept awake while this page serves the kernel, if the user ticked it (lib/wake_lock.js)
  const wake = pageWakeLock();
  const say = () => model.send({ type: "visibility", page, state: document.visibilityState, wake_lock: wake.state });
  WAKE.sayers.add(say);
  const visible = async () => { await wake.visibility(); say(); };
  let asked = false;
  // a closed or reloaded tab says so on its way out: the kernel ends the run it served as interrupted at once
  const bye = () => model.send({ type: "bye", page });
  document.addEventListener("visibilitychange", visible);
  window.addEventListener("pagehide", bye);
  return () => {
    WAKE.sayers.delete(say);
    document.removeEventListener("visibilitychange", visible);
    window.removeEventListener("pagehide", bye);
  };
}

// One wake lock per page (it is the screen's), shared by initialize and the views: anywidget hands each of them
// its own model object, so nothing set on one is seen by the other.
const WAKE = { lock: null, sayers: new Set(), views: new Set() };
function pageWakeLock() {
  if (!WAKE.lock) {
    WAKE.lock = createWakeLock({ onChange: () => { WAKE.sayers.forEach((f) => f()); WAKE.views.forEach((f) => f()); } });
  }
  return WAKE.lock;
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "sc-w sc-gpu";
  const status = document.createElement("span");
  status.className = "sc-gpu-status";
  // the user's consent to a Screen Wake Lock while this tab trains (a sleeping screen stops the run)
  const label = document.createElement("label");
  label.className = "sc-gpu-wake";
  label.style.marginLeft = "1em";
  label.title = "Ask the browser to keep the screen on while this tab's GPU trains for the kernel (Screen Wake Lock)";
  const box = document.createElement("input");
  box.type = "checkbox";
  box.dataset.role = "keep-awake";
  const wake = pageWakeLock();
  box.checked = wake.wanted();
  const said = document.createElement("span");
  box.addEventListener("change", () => { wake.choose(box.checked); });
  label.append(box, " keep the screen awake while it trains", said);
  const draw = () => {
    status.textContent = model.get("status") || "browser GPU";
    root.dataset.state = model.get("state") || "";
    const s = wake.state;
    said.textContent = s && s !== "off" ? ` (${s})` : "";
    label.dataset.wake = s;
  };
  model.on("change:status", draw);
  model.on("change:state", draw);
  WAKE.views.add(draw);
  draw();
  root.append(status, label);
  el.append(root);
  return () => {
    model.off("change:status", draw);
    model.off("change:state", draw);
    WAKE.views.delete(draw);
  };
}

export default { initialize, render };
