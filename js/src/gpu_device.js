// The `browser` device's widget: the page's navigator.gpu serving the kernel's engine. The executor
// (lib/webgpu_executor.js) answers each kernel message ({id, msg} plus blobs) with {id, reply} plus the bytes it
// read back. It lives with the model (initialize), so a message is answered whether or not the view is shown.
import { createExecutor } from "./lib/webgpu_executor.js";

export { createExecutor };

function initialize({ model }) {
  const ex = createExecutor();
  model._scellisExecutor = ex;
  let chain = Promise.resolve();
  model.on("msg:custom", (content, buffers) => {
    if (!content || content.type !== "gpu") return;
    // one at a time, in the order sent
    chain = chain.then(async () => {
      const { reply, buffers: out } = await ex.handle(content.msg, buffers || []);
      model.send({ type: "gpu-reply", id: content.id, reply }, undefined, out);
    });
  });
  // the kernel sends nothing before this: a message that arrived before the model existed would be lost
  ex.handle({ op: "hello" }).then(({ reply }) => model.send({ type: "ready", hello: reply }));
  const visible = () => model.send({ type: "visibility", state: document.visibilityState });
  document.addEventListener("visibilitychange", visible);
  return () => document.removeEventListener("visibilitychange", visible);
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
