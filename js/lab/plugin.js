// The JupyterLab plugin: every code cell of every notebook whose first line is `%%scellis ...` gets the
// editor language cellMimeType() names (TOML for a spec, Python for a catalog entry), by setting the cell
// model's MIME type, as JupyterLab itself does per notebook from the kernel's language. A cell that stops
// being one gets back the MIME type the notebook gave it. Nothing here may break the lab: each step is guarded
// and a failure is one console warning.
import { cellMimeType } from "./cell_language.js";

export const PLUGIN_ID = "scellis-jupyter:cell-magic-syntax";

const followed = new WeakSet();       // the cell models already followed

function warn(what, e) {
  console.warn(`${PLUGIN_ID}: ${what}; %%scellis cells keep the notebook's highlighting`, e);
}

/** Follow one cell model: re-choose its MIME type when its source changes, or when the notebook resets it.
 *
 * A cell editor loads the language of each MIME type it is given asynchronously and applies whichever load
 * finishes last, so ours is set only once the language the cell has now is loaded (`settle`): else the
 * notebook's Python, still loading, could land after our TOML and win. */
function followCell(model, settle) {
  if (!model || model.type !== "code" || followed.has(model)) return;
  followed.add(model);
  const state = { base: model.mimeType, setting: false };
  const want = () => cellMimeType(model.sharedModel.getSource()) ?? state.base;
  const apply = () => {
    try {
      if (model.isDisposed || model.mimeType === want()) return;
      state.setting = true;
      try { model.mimeType = want(); } finally { state.setting = false; }
    } catch (e) {
      warn("a cell's language could not be set", e);
    }
  };
  const schedule = () => {
    try {
      if (!model.isDisposed && model.mimeType !== want()) settle(model.mimeType).then(apply);
    } catch (e) {
      warn("a cell's language could not be set", e);
    }
  };
  model.mimeTypeChanged.connect(() => {
    if (state.setting) return;
    state.base = model.mimeType;          // the notebook's choice (e.g. the kernel's language arrived)
    schedule();
  });
  model.sharedModel.changed.connect((_, change) => { if (!change || change.sourceChange) schedule(); });
  schedule();
}

function followNotebook(notebook, settle) {
  const attach = () => {
    const cells = notebook.model?.cells;
    if (!cells) return;
    for (const m of cells) followCell(m, settle);
    cells.changed.connect((_, args) => {
      for (const m of args.newValues ?? []) followCell(m, settle);
    });
  };
  notebook.modelChanged?.connect(() => {
    try {
      attach();
    } catch (e) {
      warn("a notebook could not be followed", e);
    }
  });
  attach();
}

/** The plugin object, given the tokens taken from the lab's own packages: the notebook tracker's, and the
 * editor language registry's (undefined if the lab has none: then a language is given a moment to load instead).
 * Both are optional, so a page without notebooks (Notebook 7's file browser) activates it and it does nothing. */
export function makePlugin(INotebookTracker, IEditorLanguageRegistry) {
  return {
    id: PLUGIN_ID,
    description: "Highlights %%scellis cells as TOML and %%scellis catalog cells as Python.",
    autoStart: true,
    optional: IEditorLanguageRegistry ? [INotebookTracker, IEditorLanguageRegistry] : [INotebookTracker],
    activate(app, tracker, languages) {
      if (!tracker) return;
      const settle = async (mime) => {
        try {
          if (languages?.getLanguage) await languages.getLanguage(mime);
        } catch (e) { /* the editor reports a language that fails to load */ }
        await new Promise((r) => setTimeout(r, languages?.getLanguage ? 0 : 300));
      };
      const follow = (panel) => {
        try {
          followNotebook(panel.content, settle);
        } catch (e) {
          warn("a notebook could not be followed", e);
        }
      };
      tracker.forEach(follow);
      tracker.widgetAdded.connect((_, panel) => follow(panel));
    },
  };
}
