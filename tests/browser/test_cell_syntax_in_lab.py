"""Issue 35 item 9, in a real JupyterLab: a `%%scellis` cell's body is highlighted as TOML (a table header is
one atom token, a key a property, a string a string) and a `%%scellis catalog ...` cell's as Python, while
any other cell keeps the notebook's Python; typing `%%scellis` on top of a cell turns it to TOML, and deleting
that line turns it back. No cell is run: the highlighting needs no kernel.
Screenshots: artifacts/lab-cell-syntax-{0,1}.png."""
import platform
import time

import nbformat
import pytest

import lab_notebook as notebook
from fixtures.lab import LABEXTENSIONS

pytestmark = pytest.mark.slow

SPEC = '''%%scellis digits
# the spec of a small classifier
[data]
dataset = "digits"
[model]
nodes = [{ op = "linear", out = 64 }, { op = "relu" }, { op = "linear", out = 10 }]
[recipe]
optimizer = { name = "adamw", lr = 3e-3 }
batch_size = 64'''

CATALOG = '''%%scellis catalog optimizer my_sgd
from scellis_jupyter.catalog import optimizer

@optimizer("my_sgd", summary="plain SGD")
class MySGD:
    def update(self, p, g, state, step, lr):
        return [p - lr * g], {"note": "no state"}'''

PLAIN = '''lr = 3e-3
[model]'''

# The colours JupyterLab's highlight style gives each tag (its theme's CSS variables), read in the page.
VARS = ("atom", "property", "string", "keyword", "comment", "number")

TOKENS = """i => {
  const cell = document.querySelectorAll('.jp-Notebook .jp-Cell')[i];
  const content = cell.querySelector('.cm-content');
  const probe = document.createElement('span');
  content.appendChild(probe);
  const vars = {};
  for (const v of %s) {
    probe.style.color = `var(--jp-mirror-editor-${v}-color)`;
    vars[v] = getComputedStyle(probe).color;
  }
  probe.remove();
  const spans = [...content.querySelectorAll('.cm-line span')].filter(s => !s.children.length)
    .map(s => ({text: s.textContent, color: getComputedStyle(s).color}));
  return {vars, spans};
}""" % list(VARS)


def _tokens(page, i: int) -> tuple[dict, dict[str, set]]:
    """(the theme's colour per tag, {token text: {its colours}}) for cell `i`'s editor."""
    got = page.evaluate(TOKENS, i)
    by_text: dict[str, set] = {}
    for s in got["spans"]:
        by_text.setdefault(s["text"], set()).add(s["color"])
    return got["vars"], by_text


def _wait_for(page, i: int, check, timeout: float = 20.0):
    """Poll cell `i`'s tokens until `check(vars, tokens)` passes (the language loads asynchronously); the last
    AssertionError is raised if it never does."""
    t0 = time.time()
    while True:
        vars_, toks = _tokens(page, i)
        try:
            return check(vars_, toks)
        except AssertionError:
            if time.time() - t0 > timeout:
                raise
            time.sleep(0.25)


def _toml(v, t):
    assert t.get("[model]") == {v["atom"]}, f"a table header is one TOML atom token: {t}"
    assert t.get("[recipe]") == {v["atom"]}, t
    assert t.get("dataset") == {v["property"]}, f"a key is a TOML property: {t}"
    assert t.get('"digits"') == {v["string"]}, t
    assert t.get("batch_size") == {v["property"]}, t
    assert len({v["atom"], v["property"], v["string"]}) == 3


def _python(v, t):
    assert "[model]" not in t and "[recipe]" not in t, f"no TOML table header in a Python cell: {t}"
    assert v["keyword"] in t.get("class", set()) and v["keyword"] in t.get("return", set()), t
    assert t.get('"no state"') == {v["string"]}, t


def _plain_python(v, t):
    assert "[model]" not in t, f"a cell without %%scellis stays Python: {t}"
    assert t.get("3e-3") == {v["number"]}, t


def _text(cell) -> str:
    return "\n".join(cell.locator(".cm-line").all_inner_texts())


def _typed_toml(v, t):
    assert t.get("[model]") == {v["atom"]} and t.get("lr") == {v["property"]}, t


# A notebook saved by JupyterLab carries the kernel's language_info: its cells are Python from the start. One
# written by nbformat has none: its cells get the kernel's language once the kernel is up.
LANGUAGE_INFO = {"name": "python", "mimetype": "text/x-python", "codemirror_mode": {"name": "ipython", "version": 3},
                 "file_extension": ".py", "nbconvert_exporter": "python", "pygments_lexer": "ipython3",
                 "version": platform.python_version()}     # as the kernel reports it, so opening changes nothing


@pytest.mark.parametrize("saved", [True, False], ids=["with-language-info", "without-language-info"])
def test_scellis_cells_are_highlighted_as_toml_and_catalog_cells_as_python(lab, chromium_browser, artifacts, saved):
    assert (LABEXTENSIONS / "scellis-jupyter" / "package.json").is_file(), \
        "the lab extension is built by the install (pip install -e .)"
    url, nb_dir = lab
    name = f"syntax-{int(saved)}.ipynb"
    path = notebook.write_cells(nb_dir / name, SPEC, CATALOG, PLAIN)
    if saved:
        nb = nbformat.read(path, as_version=4)
        nb.metadata["language_info"] = LANGUAGE_INFO
        nbformat.write(nb, path)
    ctx = chromium_browser.new_context(viewport={"width": 1100, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    warnings: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: warnings.append(m.text) if "scellis" in m.text else None)
    try:
        page.goto(f"{url}/lab/tree/{name}?reset")          # a fresh workspace: this notebook is the only one open
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
        assert page.locator(".jp-NotebookPanel").count() == 1
        page.wait_for_function("() => document.querySelectorAll('.jp-Notebook .jp-Cell .cm-content').length >= 3",
                               timeout=30_000)
        _wait_for(page, 0, _toml)
        _wait_for(page, 1, _python)
        _wait_for(page, 2, _plain_python)
        # the kernel's language_info resets every cell's language once it is up: the %%scellis cells keep theirs
        page.wait_for_function("() => /Idle/.test(document.querySelector('#jp-main-statusbar')?.textContent || '')",
                               timeout=60_000)
        _wait_for(page, 0, _toml)
        _wait_for(page, 1, _python)
        if saved:       # (the other has its language_info added by the kernel, which JupyterLab marks as a change)
            assert not page.locator(".jp-mod-dirty").count(), "choosing a cell's language leaves the notebook as it was"
        page.screenshot(path=str(artifacts / f"lab-cell-syntax-{int(saved)}.png"))

        # typing the magic on top of the plain cell makes it TOML; deleting it gives it back the notebook's Python
        cell = page.locator(".jp-Notebook .jp-Cell").nth(2)
        cell.locator(".cm-content").click()
        cell.locator(".cm-editor.cm-focused").wait_for(timeout=10_000)
        page.keyboard.press("Control+Home")
        page.keyboard.type("%%scellis typed\n")
        _wait_for(page, 2, _typed_toml)
        assert _text(cell) == "%%scellis typed\n" + PLAIN
        page.keyboard.press("Control+Home")
        page.keyboard.press("Shift+ArrowDown")
        page.keyboard.press("Delete")
        _wait_for(page, 2, _plain_python)
        assert _text(cell) == PLAIN
        assert not errors, errors
        assert not warnings, warnings
    except BaseException:
        page.screenshot(path=str(artifacts / f"lab-cell-syntax-{int(saved)}-failure.png"))
        raise
    finally:
        ctx.close()
