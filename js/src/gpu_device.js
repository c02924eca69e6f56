// The `browser` device's widget: the page's navigator.gpu serving the kernel's engine. The executor
// (lib/webgpu_executor.js) answers each kernel message ({id, msg} plus blobs) with {id, reply} plus the bytes it
// read back. It lives with the model (initialize), so a message is answered whether or not the view is shown.
import { createExecutor } from "./lib/webgpu_executor.js";

export { createExecutor };

function initialize({ model }) {
  const ex = createExecutor();
  model._scellisExecutor = ex;
  // one page owns the kernel's GPU work (the first to say hello); another tab on the notebook only watches
  const page = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
  let chain = Promise.resolve();
  model.on("msg:custom", (content, buffers) => {
    if (!content || content.type !== "gpu" || content.page !== page) return;
    // one at a time, in the order sent
    if (!asked) { asked = true; visible(); }
    chain = chain.then(async () => {
      const { reply, buffers: out } = await ex.handle(content.msg, buffers || []);
      model.send({ type: "gpu-reply", id: content.id, reply }, undefined, out);
    });
  });
  // the kernel sends nothing before this: a message that arrived before the model existed would be lost
  ex.handle({ op: "hello" }).then(({ reply }) => model.send({ type: "ready", page, hello: reply }));
  // the screen kept awake while this page serves the kernel (where the browser lets it: a visible tab, a secure
  // page; it is released whenever the tab is hidden and asked for again when it is shown)
  let wake = "";
  let lock = null;
  const keepAwake = async () => {
    if (lock || document.visibilityState !== "visible") return;
    if (!navigator.wakeLock) { wake = "this browser has no Screen Wake Lock"; return; }
    try {
      lock = await navigator.wakeLock.request("screen");
      wake = "held";
      lock.addEventListener("release", () => { lock = null; });
    } catch (e) { wake = `refused: ${e.message || e.name}`; }
  };
  const visible = async () => {
    if (document.visibilityState === "visible") await keepAwake();
    model.send({ type: "visibility", page, state: document.visibilityState, wake_lock: wake });
  };
  let asked = false;
  // a closed or reloaded tab says so on its way out: the kernel ends the run it served as interrupted at once
  const bye = () => model.send({ type: "bye", page });
  document.addEventListener("visibilitychange", visible);
  window.addEventListener("pagehide", bye);
  return () => { document.removeEventListener("visibilitychange", visible); window.removeEventListener("pagehide", bye); };
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "sc-w sc-gpu";
  const draw = () => {
    root.textContent = model.get("status") || "browser GPU";
    root.dataset.state = model.get("state") || "";
  };
  model.on("change:status", draw);
  model.on("change:state", draw);
  draw();
  el.append(root);
  return () => { model.off("change:status", draw); model.off("change:state", draw); };
}

export default { initialize, render };
