import { describe, it, expect, vi, beforeAll } from "vitest";
import { makePlugin } from "../lab/plugin.js";
import { PYTHON, TOML } from "../lab/cell_language.js";

// Just enough of JupyterLab's shapes (Lumino signals, cell models, a notebook tracker) to drive the plugin.
function signal(sender) {
  const slots = [];
  return { connect: (f) => { slots.push(f); }, emit: (args) => { for (const f of [...slots]) f(sender, args); } };
}

function cellModel(source, mime = "text/x-ipython") {
  const m = { type: "code", isDisposed: false, _mime: mime };
  m.mimeTypeChanged = signal(m);
  m.sharedModel = { source, changed: signal(null), getSource() { return this.source; } };
  Object.defineProperty(m, "mimeType", {
    get() { return this._mime; },
    set(v) { if (v !== this._mime) { this._mime = v; this.mimeTypeChanged.emit(v); } },
  });
  m.edit = (src) => { m.sharedModel.source = src; m.sharedModel.changed.emit({ sourceChange: [{ insert: src }] }); };
  return m;
}

function notebookPanel(models) {
  const cells = [...models];
  cells.changed = signal(cells);
  return { content: { model: { cells }, modelChanged: signal(null) } };
}

const settled = () => new Promise((r) => setTimeout(r, 10));
const TOKEN = { name: "@jupyterlab/notebook:INotebookTracker" };
const LANGUAGES_TOKEN = { name: "@jupyterlab/codemirror:IEditorLanguageRegistry" };

function activate(panels, languages = { getLanguage: async () => ({}) }) {
  const tracker = { widgetAdded: signal(null), forEach: (f) => panels.forEach(f) };
  const plugin = makePlugin(TOKEN, LANGUAGES_TOKEN);
  plugin.activate({}, tracker, languages);
  return { plugin, tracker };
}

describe("the lab plugin", () => {
  it("takes the notebook tracker and the language registry if the page has them, and starts without", () => {
    expect(makePlugin(TOKEN, LANGUAGES_TOKEN)).toMatchObject({ autoStart: true, optional: [TOKEN, LANGUAGES_TOKEN] });
    expect(makePlugin(TOKEN, undefined).optional).toEqual([TOKEN]);
    expect(makePlugin(TOKEN, LANGUAGES_TOKEN).requires ?? []).toEqual([]);
    expect(() => makePlugin(TOKEN, LANGUAGES_TOKEN).activate({}, null, null)).not.toThrow();
  });

  it("gives %%scellis cells TOML, catalog cells Python, and leaves the others", async () => {
    const spec = cellModel("%%scellis digits\n[model]"), cat = cellModel("%%scellis catalog loss l\nx = 1");
    const plain = cellModel("x = 1");
    activate([notebookPanel([spec, cat, plain])]);
    await settled();
    expect([spec.mimeType, cat.mimeType, plain.mimeType]).toEqual([TOML, PYTHON, "text/x-ipython"]);
  });

  it("keeps them when the notebook resets every cell's language, and follows edits both ways", async () => {
    const spec = cellModel("%%scellis digits\n[model]", "text/plain"), plain = cellModel("x = 1", "text/plain");
    const panel = notebookPanel([spec, plain]);
    activate([panel]);
    await settled();
    spec.mimeType = "text/x-ipython";                  // the kernel's language_info arrived
    plain.mimeType = "text/x-ipython";
    await settled();
    expect([spec.mimeType, plain.mimeType]).toEqual([TOML, "text/x-ipython"]);
    plain.edit("%%scellis catalog optimizer o\nclass O: pass");
    spec.edit("[model]");                              // the magic line deleted: the notebook's language again
    await settled();
    expect([spec.mimeType, plain.mimeType]).toEqual(["text/x-ipython", PYTHON]);
  });

  it("follows cells added later and notebooks opened later", async () => {
    const first = notebookPanel([]);
    const { tracker } = activate([first]);
    const added = cellModel("%%scellis x\n[data]");
    first.content.model.cells.push(added);
    first.content.model.cells.changed.emit({ type: "add", newValues: [added] });
    const later = cellModel("%%scellis y\n[data]");
    tracker.widgetAdded.emit(notebookPanel([later]));
    await settled();
    expect([added.mimeType, later.mimeType]).toEqual([TOML, TOML]);
  });

  it("sets a language only once the cell's current one has loaded", async () => {
    let loaded;
    const loading = new Promise((r) => { loaded = r; });
    const spec = cellModel("%%scellis digits\n[model]");
    activate([notebookPanel([spec])], { getLanguage: () => loading });
    await settled();
    expect(spec.mimeType).toBe("text/x-ipython");
    loaded({});
    await settled();
    expect(spec.mimeType).toBe(TOML);
  });
});

describe("the federated container", () => {
  beforeAll(() => { globalThis.window = globalThis; });

  it("registers the plugin with the lab's own notebook token, and none (with a warning) without it", async () => {
    await import("../lab/remote_entry.js");
    const container = globalThis._JUPYTERLAB["scellis-jupyter"];
    const module = (v, token) => ({ [v]: { get: () => Promise.resolve(() => ({ INotebookTracker: token })) } });
    container.init({ "@jupyterlab/notebook": { ...module("4.9.0", { name: "older" }), ...module("4.10.1", TOKEN) } });
    const plugins = (await container.get("./extension"))().default;
    expect(plugins.map((p) => p.optional[0])).toEqual([TOKEN]);     // the newest the lab shares

    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    container.init({});
    expect((await container.get("./extension"))().default).toEqual([]);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
    await expect(container.get("./style")).rejects.toThrow(/no module/);
  });
});
