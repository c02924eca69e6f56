import { describe, it, expect, beforeAll } from "vitest";
import { createExecutor } from "../src/lib/webgpu_executor.js";

// A fake navigator.gpu: buffers are byte arrays, a "dispatch" of the one pipeline doubles every byte of the buffer
// bound at binding 1; errors are raised where WebGPU would raise them (a bad compile, an unknown object).
function fakeGpu({ compileError = null } = {}) {
  const log = [];
  const device = {
    limits: { maxStorageBufferBindingSize: 134217728, maxBufferSize: 268435456 },
    features: new Set(["subgroups"]),
    lost: new Promise(() => {}),
    queue: {
      writeBuffer: (b, off, bytes) => { b.data.set(bytes, off); log.push("write"); },
      submit: (cbs) => { for (const cb of cbs) for (const f of cb.work) f(); log.push("submit"); },
    },
    pushErrorScope() {}, popErrorScope: async () => null,
    destroy() { log.push("destroy"); },
    createBuffer: ({ size }) => ({ size, data: new Uint8Array(size), destroy() { log.push("bufdestroy"); },
      mapAsync: async () => {}, getMappedRange(o, n) { return this.data.slice(o, o + n).buffer; }, unmap() {} }),
    createShaderModule: ({ code }) => ({ code, getCompilationInfo: async () => ({ messages: compileError ? [compileError] : [] }) }),
    createComputePipelineAsync: async () => ({ getBindGroupLayout: (i) => ({ i }) }),
    createBindGroup: ({ entries }) => ({ entries }),
    createCommandEncoder: () => {
      const work = [];
      return {
        beginComputePass: () => {
          let bg = null;
          return { setPipeline() {}, setBindGroup(_, g) { bg = g; },
            dispatchWorkgroups() { const e = bg.entries[0].resource; work.push(() => {
              for (let i = 0; i < e.size; i++) e.buffer.data[e.offset + i] *= 2; }); log.push("dispatch"); },
            end() {} };
        },
        copyBufferToBuffer: (s, so, d, dof, n) => work.push(() => d.data.set(s.data.subarray(so, so + n), dof)),
        finish: () => ({ work }),
      };
    },
  };
  const adapter = { info: { vendor: "fake", architecture: "test" }, features: new Set(["subgroups", "shader-f16"]),
    limits: { maxStorageBufferBindingSize: 134217728, maxBufferSize: 268435456 },
    requestDevice: async () => device };
  return { gpu: { requestAdapter: async () => adapter }, log };
}

beforeAll(() => { globalThis.GPUMapMode = { READ: 1 }; });

const STEP = (dev, data) => [
  ["buf", 10, 8, 0x8c], ["write", 10, 0, 0], ["mod", 11, "code", "k"], ["pipe", 12, 11, "main"],
  ["bg", 13, 12, 0, [[1, 10, 0, 8]]], ["enc", 14], ["pass", 15, 14], ["setp", 15, 12], ["setbg", 15, 0, 13],
  ["disp", 15, 1, 1, 1], ["end", 15], ["buf", 16, 8, 0x9], ["copy", 14, 10, 0, 16, 0, 8], ["finish", 14, 17],
  ["submit", [17]], ["map", 16, 0, 8]];

describe("webgpu executor", () => {
  it("says why there is no GPU", async () => {
    const ex = createExecutor(undefined);
    const { reply } = await ex.handle({ op: "hello" });
    expect(reply.gpu).toBe(false);
    expect(reply.why).toMatch(/navigator.gpu/);
  });

  it("replays a batch in order and answers the mapped bytes", async () => {
    const { gpu, log } = fakeGpu();
    const ex = createExecutor(gpu);
    expect((await ex.handle({ op: "hello" })).reply.features).toContain("subgroups");
    const open = await ex.handle({ op: "device", id: 1, features: ["subgroups", "nope"], limits: {} });
    expect(open.reply.limits.maxBufferSize).toBe(268435456);
    const { reply, buffers } = await ex.handle({ op: "batch", device: 1, cmds: STEP() }, [new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8])]);
    expect(reply.ok).toBe(true);
    expect([...new Uint8Array(buffers[0])]).toEqual([2, 4, 6, 8, 10, 12, 14, 16]);
    expect(log.filter((x) => x === "dispatch").length).toBe(1);
    expect(ex.stats.dispatches).toBe(1);
  });

  it("reports a compile error as :line:col lines and stops the batch", async () => {
    const { gpu } = fakeGpu({ compileError: { type: "error", lineNum: 3, linePos: 7, message: "unresolved value 'nope'" } });
    const ex = createExecutor(gpu);
    await ex.handle({ op: "device", id: 2, features: [], limits: {} });
    const { reply } = await ex.handle({ op: "batch", device: 2, cmds: STEP() }, [new Uint8Array(8)]);
    expect(reply.error).toMatch(/:3:7 error: unresolved value 'nope'/);
    expect(reply.gone).toBeUndefined();
  });

  it("answers a batch for a device it never opened (a reloaded page) as gone", async () => {
    const { gpu } = fakeGpu();
    const ex = createExecutor(gpu);
    const { reply } = await ex.handle({ op: "batch", device: 99, cmds: [] });
    expect(reply.gone).toBe(true);
    expect(reply.error).toMatch(/reloaded/);
  });
});
