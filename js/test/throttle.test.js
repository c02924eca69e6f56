import { describe, it, expect } from "vitest";
import { throttle } from "../src/lib/throttle.js";

function fakeClock() {
  let t = 0;
  const timers = [];
  return {
    now: () => t,
    schedule: (f, ms) => { const id = { f, at: t + ms }; timers.push(id); return id; },
    cancel: (id) => { const i = timers.indexOf(id); if (i >= 0) timers.splice(i, 1); },
    advance(ms) {
      t += ms;
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        if (!timers.length || timers[0].at > t) break;
        timers.shift().f();
      }
    },
  };
}

describe("throttle", () => {
  it("fires the first calls at once, then at most once per interval, never losing the last", () => {
    const c = fakeClock();
    let n = 0;
    const f = throttle(() => { n++; }, { interval: 200, immediate: 3, ...c });
    f(); f(); f();
    expect(n).toBe(3);                       // the first three immediately
    for (let i = 0; i < 100; i++) { f(); c.advance(10); }   // 100 calls over 1 s
    expect(n).toBeGreaterThanOrEqual(3 + 4);
    expect(n).toBeLessThanOrEqual(3 + 6);    // about 5 a second
    c.advance(500);
    const settled = n;
    c.advance(1000);
    expect(n).toBe(settled);                 // nothing fires with nothing pending
  });
  it("a trailing call fires after the interval", () => {
    const c = fakeClock();
    let n = 0;
    const f = throttle(() => { n++; }, { interval: 200, immediate: 1, ...c });
    f(); f();
    expect(n).toBe(1);
    c.advance(199); expect(n).toBe(1);
    c.advance(1); expect(n).toBe(2);
  });
  it("flush runs a pending call now", () => {
    const c = fakeClock();
    let n = 0;
    const f = throttle(() => { n++; }, { interval: 200, immediate: 1, ...c });
    f(); f(); f.flush();
    expect(n).toBe(2);
    c.advance(1000); expect(n).toBe(2);
  });
});
