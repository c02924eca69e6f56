// The page's side of the `browser` device (scellis_jupyter/backends/wgpu/browser.py): replays the commands the
// kernel recorded against the wgpu-py API on navigator.gpu, and answers with the bytes of the buffers it mapped.
// A message is {op, ...} plus binary blobs its commands refer to by index; handles are the kernel's integers.
// Commands of a batch run in order; the first error stops the batch and is the reply's `error`.

export const PROTOCOL = 1;

const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

// adapter limits as a plain object (GPUSupportedLimits has getters only)
function limitsOf(l) {
  const out = {};
  for (const k in l) if (typeof l[k] === "number") out[k] = l[k];
  return out;
}

// a compiler's messages as ":line:col error: text" lines, the form the kernel's compile_message reads
function compileText(info) {
  return info.messages
    .filter((m) => m.type === "error")
    .map((m) => `:${m.lineNum}:${m.linePos} error: ${m.message}`)
    .join("\n");
}

export function createExecutor(gpu = globalThis.navigator && globalThis.navigator.gpu) {
  let adapter = null;
  let device = null;          // the newest device (the one a widget shows)
  const devices = new Map();  // the kernel's device id -> {device, lost}
  const objs = new Map();     // every object of every device, by the kernel's (process-unique) handle
  const stats = { batches: 0, commands: 0, dispatches: 0, bytesIn: 0, bytesOut: 0 };

  async function hello() {
    const base = { protocol: PROTOCOL, userAgent: globalThis.navigator ? navigator.userAgent : "" };
    if (!gpu) return { ...base, gpu: false, why: "this page has no navigator.gpu (WebGPU is off or unsupported, or the page is not a secure context)" };
    if (!adapter) {
      try { adapter = await gpu.requestAdapter(); } catch (e) { return { ...base, gpu: false, why: `requestAdapter failed: ${e.message}` }; }
    }
    if (!adapter) return { ...base, gpu: false, why: "navigator.gpu.requestAdapter() found no adapter" };
    const i = adapter.info || {};
    return {
      ...base, gpu: true,
      info: { vendor: i.vendor || "", architecture: i.architecture || "", device: i.device || "",
              description: i.description || "", adapter_type: i.isFallbackAdapter ? "CPU" : "Unknown" },
      features: [...adapter.features], limits: limitsOf(adapter.limits),
    };
  }

  async function open(msg) {
    const h = await hello();
    if (!h.gpu) return { error: h.why };
    const requiredFeatures = (msg.features || []).filter((f) => adapter.features.has(f));
    const requiredLimits = {};
    for (const [k, v] of Object.entries(msg.limits || {})) {
      const key = camel(k);
      if (key in adapter.limits) requiredLimits[key] = Math.min(v, adapter.limits[key]);
    }
    const d = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    // an adapter opens one device: a second open asks for the adapter anew
    adapter = null;
    device = d;
    const entry = { device: d, lost: null };
    devices.set(msg.id, entry);
    d.lost.then((info) => { entry.lost = info.message || info.reason || "lost"; });
    return { limits: limitsOf(d.limits), features: [...d.features] };
  }

  async function batch(msg, blobs) {
    const entry = devices.get(msg.device);
    if (!entry) return { error: `no device ${msg.device} is open on the page (it was reloaded)`, gone: true };
    const device = entry.device;
    if (entry.lost) return { error: `the page's GPU device was lost: ${entry.lost}`, gone: true };
    const out = [];
    const get = (id) => {
      const o = objs.get(id);
      if (o === undefined) throw new Error(`no object ${id} on the page (it was reloaded?)`);
      return o;
    };
    // a pipeline still compiling: wait for it (and keep the result in its place)
    const ready = async (id) => {
      const o = get(id);
      if (!(o instanceof Promise)) return o;
      const p = await o;
      objs.set(id, p);
      return p;
    };
    device.pushErrorScope("validation");
    device.pushErrorScope("out-of-memory");
    let failed = null;
    let failedPipeline = null;
    const compiling = [];
    try {
      for (const c of msg.cmds) {
        stats.commands++;
        switch (c[0]) {
          case "buf": objs.set(c[1], device.createBuffer({ size: c[2], usage: c[3] })); break;
          case "write": {
            const b = blobs[c[3]];
            const bytes = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
            stats.bytesIn += bytes.byteLength;
            device.queue.writeBuffer(get(c[1]), c[2], bytes);
            break;
          }
          case "mod": objs.set(c[1], { module: device.createShaderModule({ code: c[2], label: c[3] }), code: c[2] }); break;
          case "pipe": {
            // compiled in the background: every new pipeline of a batch compiles at once (they come before the
            // dispatches that use them); a compile error names the pipeline, the kernel maps it to its source
            const m = get(c[2]);
            const id = c[1];
            const p = (async () => {
              const errs = compileText(await m.module.getCompilationInfo());
              if (errs) throw Object.assign(new Error(`shader compile error:\n${errs}`), { pipeline: id });
              try {
                return await device.createComputePipelineAsync({ layout: "auto", compute: { module: m.module, entryPoint: c[3] } });
              } catch (e) {
                throw Object.assign(new Error(`pipeline creation failed: ${e.message}`), { pipeline: id });
              }
            })();
            p.catch(() => {});
            objs.set(id, p);
            compiling.push(p);
            break;
          }
          case "bg": {
            const p = await ready(c[2]);
            const entries = c[4].map(([binding, buf, offset, size]) =>
              ({ binding, resource: { buffer: get(buf), offset, size: size || undefined } }));
            objs.set(c[1], device.createBindGroup({ layout: p.getBindGroupLayout(c[3]), entries }));
            break;
          }
          case "enc": objs.set(c[1], device.createCommandEncoder()); break;
          case "pass": objs.set(c[1], get(c[2]).beginComputePass()); break;
          case "setp": get(c[1]).setPipeline(await ready(c[2])); break;
          case "setbg": get(c[1]).setBindGroup(c[2], get(c[3])); break;
          case "disp": get(c[1]).dispatchWorkgroups(c[2], c[3], c[4]); stats.dispatches++; break;
          case "end": get(c[1]).end(); objs.delete(c[1]); break;
          case "copy": get(c[1]).copyBufferToBuffer(get(c[2]), c[3], get(c[4]), c[5], c[6]); break;
          case "finish": objs.set(c[2], get(c[1]).finish()); objs.delete(c[1]); break;
          case "submit": device.queue.submit(c[1].map(get)); for (const id of c[1]) objs.delete(id); break;
          case "map": {
            const b = get(c[1]);
            await b.mapAsync(GPUMapMode.READ, c[2], c[3]);
            const copy = b.getMappedRange(c[2], c[3]).slice(0);
            b.unmap();
            stats.bytesOut += copy.byteLength;
            out.push(copy);
            break;
          }
          case "destroy": { const b = objs.get(c[1]); if (b) b.destroy(); break; }
          case "drop": objs.delete(c[1]); break;
          default: throw new Error(`unknown command ${c[0]}`);
        }
      }
    } catch (e) {
      failed = e.message || String(e);
      if (e.pipeline !== undefined) failedPipeline = e.pipeline;
    }
    // every pipeline this batch made has compiled (or says why not) before the reply: an error names its kernel
    for (const p of compiling) {
      try { await p; } catch (e) {
        if (failedPipeline === null && e.pipeline !== undefined) { failed = e.message; failedPipeline = e.pipeline; }
      }
    }
    const oom = await device.popErrorScope();
    const val = await device.popErrorScope();
    stats.batches++;
    if (entry.lost) return { error: `the page's GPU device was lost: ${entry.lost}`, gone: true };
    const err = (failedPipeline !== null && failed) || failed || (val && `WebGPU validation error: ${val.message}`) || (oom && `WebGPU out of memory: ${oom.message}`);
    if (err) return failedPipeline === null ? { error: err, buffers: [] } : { error: err, pipeline: failedPipeline, buffers: [] };
    return { ok: true, buffers: out };
  }

  // one message in, one reply out: {reply, buffers}
  async function handle(msg, blobs = []) {
    let reply;
    try {
      if (msg.op === "hello") reply = await hello();
      else if (msg.op === "device") reply = await open(msg);
      else if (msg.op === "batch") reply = await batch(msg, blobs);
      else if (msg.op === "stats") reply = { ...stats };
      else if (msg.op === "close") { const e = devices.get(msg.device); if (e) { e.device.destroy(); devices.delete(msg.device); } reply = { ok: true }; }
      else reply = { error: `unknown message ${msg.op}` };
    } catch (e) {
      reply = { error: e.message || String(e) };
    }
    const buffers = reply.buffers || [];
    delete reply.buffers;
    return { reply, buffers };
  }

  return { handle, stats, get device() { return device; } };
}
