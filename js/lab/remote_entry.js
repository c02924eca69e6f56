// The federated-extension container JupyterLab loads (jupyterlab._build.load in the labextension's
// package.json): `window._JUPYTERLAB[name]` with init(shareScope) and get(module), the interface a webpack
// Module Federation container offers and JupyterLab's main.js calls. Written by hand and bundled by esbuild, so
// the install needs no webpack and no JupyterLab npm packages. What it takes from the lab are two tokens, the
// notebook tracker's and the editor language registry's, from the modules the lab itself shares (the share
// scope it passes to init()). Without the notebook's, it registers no plugin and says so once in the console.
import { makePlugin, PLUGIN_ID } from "./plugin.js";

const NAME = "scellis-jupyter";
let shareScope = null;

/** The newest of a share scope's versions of one package ("4.10.1" after "4.9.0"). */
function newest(versions) {
  const key = (v) => v.split(/[.+-]/).map((p) => (/^\d+$/.test(p) ? Number(p) : -1));
  const cmp = (a, b) => {
    const x = key(a), y = key(b);
    for (let i = 0; i < Math.max(x.length, y.length); i++) {
      if ((x[i] ?? 0) !== (y[i] ?? 0)) return (y[i] ?? 0) - (x[i] ?? 0);
    }
    return 0;
  };
  return Object.keys(versions).sort(cmp)[0];
}

async function shared(pkg) {
  const versions = shareScope?.[pkg];
  const v = versions && newest(versions);
  if (!v || !versions[v].get) return null;
  const factory = await versions[v].get();
  versions[v].loaded = 1;
  return factory();
}

async function extension() {
  const off = "%%scellis cells keep the notebook's highlighting";
  try {
    const notebook = await shared("@jupyterlab/notebook");
    const codemirror = await shared("@jupyterlab/codemirror").catch(() => null);
    if (notebook?.INotebookTracker) return [makePlugin(notebook.INotebookTracker, codemirror?.IEditorLanguageRegistry)];
    console.warn(`${PLUGIN_ID}: the lab shares no @jupyterlab/notebook; ${off}`);
  } catch (e) {
    console.warn(`${PLUGIN_ID}: not started; ${off}`, e);
  }
  return [];
}

const container = {
  init(scope) {
    shareScope = scope;
  },
  async get(module) {
    if (module !== "./extension") throw new Error(`${NAME} has no module ${module}`);
    const plugins = await extension();
    return () => ({ __esModule: true, default: plugins });
  },
};

window._JUPYTERLAB = window._JUPYTERLAB || {};
window._JUPYTERLAB[NAME] = container;
