import { describe, it, expect } from "vitest";
import { siteProgress, curve, budget } from "../src/lib/rounds.js";

const STATE = {
  sites: ["a", "b", "c"],
  rounds: [
    { round: 1, sites: ["a", "b", "c"], dropped: [], losses: { a: 0.9, b: 1.1, c: null }, metric: 0.5 },
    { round: 2, sites: ["a", "c"], dropped: ["b"], losses: { a: 0.7, c: 0.8 }, metric: 0.75 },
    { round: 3, sites: ["a", "b"], dropped: ["c"], losses: { a: 0.6, b: 0.95 }, metric: null },
  ],
  privacy: { spent: 1.5, epsilon: 6, delta: 1e-5 },
};

describe("round monitor", () => {
  it("counts each site's answered and silent rounds and keeps its last finite loss", () => {
    const p = siteProgress(STATE, 6);
    expect(p.map((s) => [s.site, s.answered, s.silent])).toEqual([["a", 3, 0], ["b", 2, 1], ["c", 2, 1]]);
    expect(p[0].loss).toBe(0.6);
    expect(p[2].loss).toBe(0.8);        // round 1's null (no loss under DP) does not erase a later one
    expect(p[1].frac).toBeCloseTo(2 / 6, 12);
    expect(siteProgress(STATE)[1].frac).toBeCloseTo(2 / 3, 12);   // no plan: of the rounds run
  });
  it("says each site's part in the round in flight, and nothing once that round has landed", () => {
    const live = { round: 4, waiting: ["b"], done: ["a"] };
    expect(siteProgress(STATE, 6, live).map((p) => p.now)).toEqual(["sent", "training", "out"]);
    expect(siteProgress(STATE, 6, { round: 3, waiting: [], done: ["a", "b"] }).map((p) => p.now)).toEqual([null, null, null]);
    expect(siteProgress(STATE, 6, {}).map((p) => p.now)).toEqual([null, null, null]);
  });
  it("draws only evaluated rounds, spanning the box", () => {
    const c = curve(STATE.rounds, 360, 120, 24);
    expect(c.n).toBe(2);
    const xy = c.points.split(" ").map((p) => p.split(",").map(Number));
    expect(xy[0]).toEqual([24, 96]);    // first round, lowest value: left, bottom
    expect(xy[1]).toEqual([336, 24]);   // last evaluated, highest: right, top
    expect([c.lo, c.hi, c.last]).toEqual([0.5, 0.75, 0.75]);
    expect(curve([{ round: 1, metric: null }], 360, 120)).toBe(null);
  });
  it("gives the y axis ticks inside the box, with room on the left for their labels", () => {
    const c = curve(STATE.rounds, 360, 120, 24, 44);
    const xy = c.points.split(" ").map((p) => p.split(",").map(Number));
    expect(xy[0][0]).toBe(44);
    expect(c.yticks.map((t) => t.v)).toEqual([0.5, 0.6, 0.7].map((v) => expect.closeTo(v, 12)));
    expect(c.yticks[0].y).toBeCloseTo(96, 6);          // 0.5, the lowest value, at the bottom
    for (const t of c.yticks) expect(t.y >= 24 && t.y <= 96).toBe(true);
    const one = curve([{ round: 1, metric: 0.9 }], 360, 120, 24, 44);   // a single value: a band around it
    expect(one.yticks.length).toBeGreaterThanOrEqual(2);
    expect(one.yticks.every((t) => t.v > 0.8 && t.v < 1)).toBe(true);
  });
  it("clamps the budget fraction and has none without DP", () => {
    expect(budget(STATE.privacy).frac).toBeCloseTo(0.25, 12);
    expect(budget({ spent: 9, epsilon: 6, delta: 1e-5 }).frac).toBe(1);
    expect(budget(null)).toBe(null);
  });
});
