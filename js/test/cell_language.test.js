import { describe, it, expect } from "vitest";
import { cellMimeType, PYTHON, TOML } from "../lab/cell_language.js";

describe("cellMimeType", () => {
  it("gives a %%scellis cell TOML and a %%scellis catalog cell Python", () => {
    expect(cellMimeType('%%scellis digits\n[model]\nname = "x"')).toBe(TOML);
    expect(cellMimeType("%%scellis\n[data]")).toBe(TOML);
    expect(cellMimeType("%%scellis")).toBe(TOML);
    expect(cellMimeType("%%scellis  wine --title 'x'\r\n[data]")).toBe(TOML);
    expect(cellMimeType("%%scellis catalog optimizer my_sgd\nclass A: pass")).toBe(PYTHON);
    expect(cellMimeType("%%scellis\tcatalog loss l\n")).toBe(PYTHON);
  });

  it("leaves every other cell to the notebook", () => {
    for (const src of ["", "x = 1", "%scellis train digits", "%%scellisx\n[a]", " %%scellis digits", "%%sql\nselect 1",
      "# %%scellis digits", "x = 1\n%%scellis digits"]) {
      expect(cellMimeType(src)).toBe(null);
    }
  });

  it("reads only the first line: a model named catalog-something is a spec", () => {
    expect(cellMimeType("%%scellis catalogue\n[model]")).toBe(TOML);
    expect(cellMimeType("%%scellis digits\ncatalog")).toBe(TOML);
  });
});
