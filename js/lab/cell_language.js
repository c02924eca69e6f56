// Which language a notebook cell's editor should use, from its first line: a `%%scellis` cell holds a spec
// (TOML), a `%%scellis catalog ...` cell a catalog entry (Python); any other cell keeps the notebook's own.
// Pure, so the JS tests check it without JupyterLab.

export const TOML = "text/x-toml";
export const PYTHON = "text/x-python";

/** The MIME type of the language for a cell whose source is `source`, or null for "the notebook's own". */
export function cellMimeType(source) {
  const nl = source.indexOf("\n");
  const first = nl < 0 ? source : source.slice(0, nl);
  if (!/^%%scellis(\s|$)/.test(first)) return null;
  return first.slice("%%scellis".length).trim().split(/\s+/)[0] === "catalog" ? PYTHON : TOML;
}
