import { describe, it, expect } from "vitest";
import { hideFallback, hideRule, withFallback } from "../src/lib/fallback.js";

function fakeDoc() {
  const head = { kids: [], append(n) { this.kids.push(n); n.parent = this; } };
  return { head, createElement: (tag) => ({ tag, attrs: {}, textContent: "",
    setAttribute(k, v) { this.attrs[k] = v; }, remove() { head.kids = head.kids.filter((k) => k !== this); } }) };
}

describe("the live view hides its static twin", () => {
  it("adds one rule per widget, kept until its last view goes", () => {
    const doc = fakeDoc();
    const a = hideFallback("abc123", doc);
    const b = hideFallback("abc123", doc);
    expect(doc.head.kids.length).toBe(1);
    expect(doc.head.kids[0].textContent).toBe(hideRule("abc123"));
    expect(hideRule("abc123")).toContain('.jp-OutputArea-child:has([data-scellis-static="abc123"])');
    a();
    a();                                   // undoing twice counts once
    expect(doc.head.kids.length).toBe(1);
    b();
    expect(doc.head.kids.length).toBe(0);
  });
  it("ignores a missing or odd id (no selector injection) and a page without a document", () => {
    const doc = fakeDoc();
    hideFallback("", doc);
    hideFallback('x"]{}*{display:none', doc);
    hideFallback("abc", undefined);
    expect(doc.head.kids.length).toBe(0);
  });
  it("wraps a render so its cleanup also shows the static form again", () => {
    let cleaned = false;
    const render = withFallback(() => () => { cleaned = true; });
    const undo = render({ model: { get: () => "" }, el: {} });
    undo();
    expect(cleaned).toBe(true);
  });
});
