"""The TOML position scanner: hand-computed line:col for every construct, plus a whole-document sweep."""
import tomllib

import pytest

from scellis_jupyter.spec.locate import Locator, format_path

from fixtures import spec_text

EXAMPLE = spec_text("locate_example")

TRICKY = '''# a comment with [brackets] and = signs and "quotes"
title = "a # not a comment = [x]"   # but this is
path = 'C:\\dir\\[x]#y'
esc = "quote \\" inside # still string"
"quoted.key" = 1
site."google.com".visits = 2
a . b . c = 3
doc = """
multi-line with ] and # and "quotes"
and = signs"""
lit = \'\'\'raw ]]]
# not a comment\'\'\'
nested = [ [1, 2], ["x]", "y#"], { k = "}" } ]
long = [
  1,   # one
  # a whole comment line [ ]
  2,
  3,   # trailing comma next
]

[ dog . "tater.man" ]
type.name = "pug"

[[fruits]]
name = "apple"

[fruits.physical]
color = "red"

[[fruits.varieties]]
name = "red delicious"

[[fruits]]
name = "banana"
'''


def at(loc, *path, value=False):
    return loc.locate(path, value)


def test_example_keys_and_elements():
    loc = Locator(EXAMPLE)
    assert at(loc, "name") == (1, 1)
    assert at(loc, "name", value=True) == (1, 8)
    assert at(loc, "data") == (3, 2)
    assert at(loc, "data", "dataset") == (4, 1)
    assert at(loc, "data", "dataset", value=True) == (4, 11)
    assert at(loc, "data", "split") == (5, 1)
    assert at(loc, "data", "split", "train") == (5, 11)
    assert at(loc, "data", "split", "val") == (5, 24)
    assert at(loc, "data", "split", "test", value=True) == (5, 42)
    assert at(loc, "model", "nodes") == (8, 1)
    assert at(loc, "model", "nodes", 0) == (9, 3)
    assert at(loc, "model", "nodes", 0, "op") == (9, 5)
    assert at(loc, "model", "nodes", 0, "op", value=True) == (9, 10)
    assert at(loc, "model", "nodes", 0, "out") == (9, 20)
    assert at(loc, "model", "nodes", 0, "init", value=True) == (9, 38)
    assert at(loc, "model", "nodes", 1) == (10, 3)
    assert at(loc, "model", "nodes", 2, "p") == (11, 21)
    assert at(loc, "model", "nodes", 3, "name") == (12, 5)
    assert at(loc, "model", "nodes", 3, "op") == (12, 22)
    assert at(loc, "model", "nodes", 3, "out", value=True) == (12, 43)
    assert at(loc, "recipe", "optimizer", "lr") == (17, 31)
    assert at(loc, "recipe", "optimizer", "lr", value=True) == (17, 36)
    assert at(loc, "recipe", "optimizer", "weight_decay") == (17, 42)
    assert at(loc, "recipe", "metrics", 1) == (18, 24)


def test_fallback_to_nearest_ancestor():
    loc = Locator(EXAMPLE)
    assert at(loc, "recipe", "optimizer", "betas") == (17, 1)      # absent key -> the optimizer key
    assert at(loc, "model", "nodes", 1, "p") == (10, 3)            # absent attr -> its node
    assert at(loc, "model", "nodes", 9) == (8, 1)                  # absent element -> the array key
    assert at(loc, "plan", "memory") == (1, 1)                      # absent section -> start of text
    assert at(loc, "model", "nodes", 2, "p", "deeper", value=True) == (11, 21)
    assert loc.exact(("model", "nodes", 2, "p"))
    assert not loc.exact(("model", "nodes", 2, "q"))


def test_strings_comments_and_dotted_keys():
    loc = Locator(TRICKY)
    assert at(loc, "title") == (2, 1)
    assert at(loc, "path") == (3, 1)
    assert at(loc, "esc") == (4, 1)
    assert at(loc, "quoted.key") == (5, 1)
    assert at(loc, "site") == (6, 1)
    assert at(loc, "site", "google.com") == (6, 6)
    assert at(loc, "site", "google.com", "visits") == (6, 19)
    assert at(loc, "a") == (7, 1)
    assert at(loc, "a", "b") == (7, 5)
    assert at(loc, "a", "b", "c") == (7, 9)
    assert at(loc, "doc") == (8, 1)
    assert at(loc, "lit") == (11, 1)
    assert at(loc, "nested") == (13, 1)
    assert at(loc, "nested", 0) == (13, 12)
    assert at(loc, "nested", 0, 1) == (13, 16)
    assert at(loc, "nested", 1, 1) == (13, 27)
    assert at(loc, "nested", 2) == (13, 34)
    assert at(loc, "nested", 2, "k") == (13, 36)
    assert at(loc, "long") == (14, 1)
    assert at(loc, "long", 0) == (15, 3)
    assert at(loc, "long", 1) == (17, 3)
    assert at(loc, "long", 2) == (18, 3)


def test_tables_and_arrays_of_tables():
    loc = Locator(TRICKY)
    assert at(loc, "dog") == (21, 3)
    assert at(loc, "dog", "tater.man") == (21, 9)
    assert at(loc, "dog", "tater.man", "type", "name") == (22, 6)
    assert at(loc, "fruits") == (24, 3)
    assert at(loc, "fruits", 0) == (24, 1)
    assert at(loc, "fruits", 0, "name") == (25, 1)
    assert at(loc, "fruits", 0, "physical") == (27, 9)
    assert at(loc, "fruits", 0, "physical", "color") == (28, 1)
    assert at(loc, "fruits", 0, "varieties", 0) == (30, 1)
    assert at(loc, "fruits", 0, "varieties", 0, "name") == (31, 1)
    assert at(loc, "fruits", 1) == (33, 1)
    assert at(loc, "fruits", 1, "name") == (34, 1)


def test_array_of_tables_nodes():
    text = 'x = 1\n[[model.nodes]]\nop = "linear"\nout = 3\n\n[[model.nodes]]\n  op = "relu"\n'
    loc = Locator(text)
    assert at(loc, "model") == (2, 3)
    assert at(loc, "model", "nodes") == (2, 9)
    assert at(loc, "model", "nodes", 0) == (2, 1)
    assert at(loc, "model", "nodes", 0, "out") == (4, 1)
    assert at(loc, "model", "nodes", 1, "op") == (7, 3)
    assert at(loc, "model", "nodes", 1, "op", value=True) == (7, 8)


def test_crlf_unicode_and_inline_table_newlines():
    text = 'name = "äöü"\r\n[recipe]\r\nloss = "mse" # ü\r\nopt = {name="sgd",lr=0.1}\r\n'
    loc = Locator(text)
    assert at(loc, "recipe", "loss") == (3, 1)
    assert at(loc, "recipe", "opt", "lr") == (4, 19)
    assert at(loc, "recipe", "opt", "lr", value=True) == (4, 22)
    # columns count characters, not bytes
    loc = Locator('x = { a = "ü€", b = 2 }\n"λ" = 1\n')
    assert at(loc, "x", "b") == (1, 17)
    assert at(loc, "λ") == (2, 1)


def test_malformed_text_never_raises_and_keeps_what_it_found():
    text = 'a = 1\nb = [1, 2\n[c]\nd = "unterminated\n'
    loc = Locator(text)
    assert at(loc, "a") == (1, 1)
    assert at(loc, "b") == (2, 1)
    for bad in ["", "[", "[[", "= 3", 'a = """never closed', "a = {b = ", "a.=1", "\x00"]:
        Locator(bad).locate(("a", "b"))


def _walk(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, path + (i,))


@pytest.mark.parametrize("text", [EXAMPLE, TRICKY], ids=["example", "tricky"])
def test_every_parsed_path_is_located_at_its_own_text(text):
    """Each key path tomllib returns is found exactly, and its position holds that key (or value)."""
    parsed = tomllib.loads(text)
    loc = Locator(text)
    lines = text.split("\n")
    for path, value in _walk(parsed):
        if not path:
            continue
        assert loc.exact(path), path
        line, col = loc.locate(path)
        rest = lines[line - 1][col - 1:]
        last = path[-1]
        if isinstance(last, str):
            assert rest.startswith(last) or rest.startswith(f'"{last}"'), (path, rest)
        elif isinstance(value, dict):
            assert rest[:1] in ("{", "["), (path, rest)
        elif isinstance(value, list):
            assert rest.startswith("["), (path, rest)
        elif isinstance(value, str):
            assert rest[:1] in ('"', "'"), (path, rest)
        else:
            assert tomllib.loads(f"v = {rest.split(',')[0].split(']')[0].strip()}")["v"] == value, (path, rest)


def test_format_path():
    assert format_path(("model", "nodes", 2, "op")) == "model.nodes[2].op"
    assert format_path(("recipe", "optimizer", "lr")) == "recipe.optimizer.lr"
    assert format_path(("site", "google.com")) == 'site."google.com"'
    assert format_path(()) == ""
