import { describe, it, expect } from "vitest";
import { bindingText, fmtB, nodeLaunches, valuesOfLaunch } from "../src/lib/stages.js";

const d = {
  program: { steps: [
    { pos: 0, value: 3, op: "matmul_fused", scope: "fc1", node: "fc1", launches: [0] },
    { pos: 1, value: 4, op: "relu", scope: "act1", node: "act1", launches: [1] },
    { pos: 2, value: 9, op: "matmul", scope: "fc1/bwd", node: "fc1", launches: [2, 3] },
    { pos: 3, value: 11, op: "fused", scope: "optimizer", node: "optimizer", launches: [] },
  ] },
};

describe("stage explorer data", () => {
  it("gathers a node's launches over forward and backward, in schedule order", () => {
    expect(nodeLaunches(d)).toEqual({ fc1: [0, 2, 3], act1: [1], optimizer: [] });
  });
  it("lists the arena values a launch binds and says what each binding holds", () => {
    const l = { step: 2, bindings: [{ buffer: "arena", value: 9 }, { buffer: "leaf:1", leaf: "fc1.weight", role: "parameter" },
      { buffer: "persistent:0", value: 20 }, { buffer: "scratch:sum-many" }] };
    expect(valuesOfLaunch(l)).toEqual([9]);
    expect(l.bindings.map((b) => bindingText(d, b))).toEqual(["value 9: matmul of fc1/bwd (step 2)",
      "fc1.weight (parameter)", "value 20", "the launcher's scratch"]);
  });
  it("formats bytes", () => {
    expect([fmtB(12), fmtB(2048), fmtB(3 * 2 ** 20)]).toEqual(["12 B", "2.0 KiB", "3.0 MiB"]);
  });
});
