"""Spec text: parsing, defaults, the content hash, and every kind of bad input with its exact line:col.

Expected positions are counted by hand from the texts below (line 1 = first line, col 1 = first char).
"""
import json
import math
import tomllib

import blake3
import numpy as np
import pytest

from scellis_jupyter.errors import ScellisError
from scellis_jupyter.spec import KNOWN, Spec, SpecError, dataset_info
from scellis_jupyter.data.info import pydoc_text, pydoc_vocab

from fixtures import spec_text

EXAMPLE = spec_text("digits_mlp_commented")

# the same content: other layout, no comments, keys reordered, tables instead of inline tables
REFORMATTED = '''name="digits-mlp"
[recipe]
seed=0
determinism="debug"
metrics=[ "accuracy","f1" ]
clip_grad_norm=1.0
precision="fp32"
batch_size=64
epochs=3
scheduler.name="cosine"
scheduler.warmup_steps=20
loss="cross_entropy"
[recipe.optimizer]
weight_decay=0.01
lr=0.003
name="adamw"

[data]
split.train=0.8
split.val=0.1
split.test=0.1
dataset="digits"

[[model.nodes]]
op="linear"
out=128
init="kaiming_normal"
[[model.nodes]]
op="relu"
[[model.nodes]]
op="dropout"
p=0.1
[[model.nodes]]
name="logits"
op="linear"
out=10
'''


def error_of(text, **kw) -> SpecError:
    with pytest.raises(SpecError) as e:
        Spec.from_text(text, **kw)
    return e.value


def bad(old, new, text=EXAMPLE, count=1):
    assert old in text, old
    out = text.replace(old, new, count)
    return out


# ---- the example ------------------------------------------------------------------------------------------
def test_example_parses_with_defaults_filled():
    s = Spec.from_text(EXAMPLE)
    assert s.name == "digits-mlp"
    assert s.data == {"dataset": "digits", "split": {"train": 0.8, "val": 0.1, "test": 0.1}}
    assert [n.op for n in s.model.nodes] == ["linear", "relu", "dropout", "linear"]
    assert s.model.nodes[0].attrs == {"out": 128, "bias": True, "init": "kaiming_normal"}
    assert s.model.nodes[2].attrs == {"p": 0.1}
    assert s.model.nodes[3].name == "logits" and s.model.nodes[3].key == "logits"
    assert s.model.nodes[1].key == "1.relu"
    r = s.recipe
    assert r["optimizer"] == {"name": "adamw", "lr": 3e-3, "weight_decay": 0.01}
    assert r["scheduler"] == {"name": "cosine", "warmup_steps": 20}
    assert (r["loss"], r["epochs"], r["batch_size"], r["precision"]) == ("cross_entropy", 3, 64, "fp32")
    assert (r["clip_grad_norm"], r["metrics"], r["determinism"], r["seed"]) == (1.0, ["accuracy", "f1"], "debug", 0)
    assert (r["steps"], r["grad_accum_steps"], r["checkpointing"], r["peft"]) == (None, 1, "none", None)
    assert (r["clip_grad_value"], r["eval_every"]) == (None, None)
    assert s.plan == {}
    assert s.input == {"shape": (64,), "dtype": "f32"}
    assert s.graph.output_shape == (10,)
    assert s.locate(("recipe", "optimizer", "lr")) == "<spec>:17:31"
    assert s.locate(("recipe", "optimizer", "lr"), value=True) == "<spec>:17:36"
    assert s.locate(("model", "nodes", 3)) == "<spec>:12:3"
    d = s.to_dict()
    assert json.loads(json.dumps(d))["model"]["nodes"][3] == {"name": "logits", "op": "linear", "out": 10,
                                                               "bias": True, "init": "kaiming_uniform"}
    assert d["hash"] == s.hash


def test_hash_is_blake3_of_canonical_json_and_ignores_layout():
    s = Spec.from_text(EXAMPLE)
    canon = json.dumps(tomllib.loads(EXAMPLE), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert s.hash == blake3.blake3(canon.encode()).hexdigest()
    assert len(s.hash) == 64
    assert Spec.from_text(REFORMATTED).hash == s.hash
    assert Spec.from_text("# header comment\n\n" + EXAMPLE.replace("    # ", "#") + "\n\n").hash == s.hash
    assert Spec.from_text(bad("lr = 3e-3", "lr = 4e-3")).hash != s.hash
    assert Spec.from_text(bad("seed = 0", "seed = 1")).hash != s.hash
    # nodes as [[model.nodes]] are the same model
    assert Spec.from_text(REFORMATTED).model == s.model


def test_a_classification_recipe_without_metrics_gets_accuracy_and_a_regression_one_its_loss():
    cls = Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n')
    assert cls.recipe["metrics"] == ["accuracy"] and cls.recipe["default_metrics"] is True
    chosen = Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n'
                            '[recipe]\nmetrics = ["f1"]\n')
    assert chosen.recipe["metrics"] == ["f1"] and not chosen.recipe.get("default_metrics")
    none = Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n'
                          '[recipe]\nmetrics = []\n')                       # an explicit empty list: none
    assert none.recipe["metrics"] == [] and not none.recipe.get("default_metrics")
    reg = Spec.from_text('[data]\ndataset = "synthetic_regression"\nn_features = 7\n'
                         '[model]\nnodes = [{ op = "linear", out = 1 }]\n')
    assert reg.recipe["metrics"] == [] and not reg.recipe.get("default_metrics")
    assert cls.hash == Spec.from_text(cls.text).hash and "metrics" not in cls.text        # the text is the text


def test_minimal_spec_defaults_and_missing_determinism():
    s = Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n')
    assert s.name == "spec"
    assert s.recipe["determinism"] is None
    assert s.recipe["optimizer"] == {"name": "adamw", "lr": 1e-3}
    assert s.recipe["scheduler"] == {"name": "constant"}
    assert (s.recipe["loss"], s.recipe["epochs"], s.recipe["batch_size"]) == ("cross_entropy", 1, 32)
    assert s.data["split"] == {"train": 0.8, "val": 0.1, "test": 0.1}
    reg = Spec.from_text('[data]\ndataset = "synthetic_regression"\nn_features = 7\n'
                         '[model]\nnodes = [{ op = "linear", out = 1 }]\n[recipe]\noptimizer = "sgd"\n')
    assert reg.recipe["loss"] == "mse"
    assert reg.recipe["optimizer"] == {"name": "sgd", "lr": 1e-3}
    assert reg.input["shape"] == (7,)


@pytest.mark.parametrize("name,lr", [("prodigy", 1.0), ("lion", 1e-4), ("sophia", 1e-4), ("adafactor", 1e-2)])
def test_an_optimizer_without_lr_gets_its_documented_default(name, lr):
    """Not 1e-3 for every optimizer: Prodigy at 1e-3 would scale its adapted step 1000x down."""
    for table in (f'"{name}"', f'{{ name = "{name}" }}'):
        s = Spec.from_text('[data]\ndataset = "iris"\n[model]\nnodes = [{ op = "linear", out = 3 }]\n'
                           f'[recipe]\noptimizer = {table}\n')
        assert s.recipe["optimizer"]["lr"] == lr


def test_optional_sections_and_keys():
    text = EXAMPLE + '''grad_accum_steps = 4
clip_grad_value = 0.5
checkpointing = "activations"
peft = { method = "lora", rank = 8, alpha = 16, targets = ["linear"] }
steps = 500
eval_every = 50

[plan]
memory = "8GiB"
device = "wgpu"
'''
    s = Spec.from_text(text)
    assert s.recipe["peft"] == {"method": "lora", "rank": 8, "alpha": 16.0, "dropout": 0.0, "targets": ["linear"]}
    assert (s.recipe["steps"], s.recipe["eval_every"], s.recipe["grad_accum_steps"]) == (500, 50, 4)
    assert (s.recipe["clip_grad_value"], s.recipe["checkpointing"]) == (0.5, "activations")
    assert s.plan == {"memory": 8 * 2 ** 30, "device": "wgpu"}


def test_input_declared_in_data():
    s = Spec.from_text('[data]\ninput = { shape = [3, 4] }\n[model]\nnodes = [{ op = "mean_pool" }]\n')
    assert s.input == {"shape": (3, 4), "dtype": "f32"} and s.graph.output_shape == (4,)
    e = error_of('[data]\ninput = { shape = [3, 4], dtype = "f64" }\n[model]\nnodes = [{ op = "relu" }]\n')
    assert e.where == "<spec>:2:35" and "unknown input dtype 'f64'" in str(e)


def test_token_input_declared_and_output_named():
    text = '''name = "lm"
[data]
dataset = "pydoc_topics"
seq_len = 32
[model]
input = { shape = [32], dtype = "i32" }
output = "head"
nodes = [
  { op = "embedding", vocab = 128, dim = 16 },
  { op = "positional_embedding", max_len = 64 },
  { op = "transformer_block", heads = 2, causal = true },
  { name = "head", op = "linear", out = 96 },
  { name = "unused", op = "relu", in = "head" },
]
'''
    s = Spec.from_text(text)
    assert s.input == {"shape": (32,), "dtype": "i32"}
    assert s.graph.output_shape == (32, 96)
    assert s.dataset.task == "lm" and s.dataset.feature_shape == (32,)


# ---- syntax errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,where,words", [
    ('name = "x"\n[recipe]\nepochs = \nbatch_size = 3\n', "<spec>:3:10", "Invalid value"),
    ('[model]\nnodes = [\n  { op = "relu" },\n  { op = "linear" out = 3 },\n]\n', "<spec>:4:19", "inline table"),
    ('[recipe]\nlr = 3e-3.5\n', "<spec>:2:10", "newline"),
    ('name = "abc', "<spec>:1:12", "Unterminated string"),
    ('a = 1\na = 2\n', "<spec>:2:6", "overwrite"),
])
def test_toml_syntax_error_positions(text, where, words):
    e = error_of(text)
    assert e.where == where
    assert "TOML syntax error" in str(e) and words in str(e)
    assert e.diagnostic.details["kind"] == "syntax"
    assert isinstance(e, ScellisError) and e.diagnostic.code == "spec"


def test_source_name_is_used_in_where():
    e = error_of('a = = 1\n', source="cell[3]")
    assert e.where == "cell[3]:1:5"


# ---- unknown keys and names -------------------------------------------------------------------------------
def test_unknown_top_level_key_suggests():
    e = error_of(bad("[model]", "[modle]"))
    assert e.where == "<spec>:7:2"
    assert "unknown key 'modle'" in str(e) and "did you mean 'model'?" in str(e)
    e = error_of("nmae = 'x'\n" + EXAMPLE.replace('name = "digits-mlp"\n', ""))
    assert e.where == "<spec>:1:1" and "did you mean 'name'?" in e.diagnostic.hint


def test_unknown_recipe_key_and_unknown_attr():
    e = error_of(bad("epochs = 3", "epoch = 3"))
    assert (e.where, e.diagnostic.hint) == ("<spec>:19:1", "did you mean 'epochs'?")
    e = error_of(bad('init = "kaiming_normal"', 'inti = "kaiming_normal"'))
    assert e.where == "<spec>:9:31"
    assert "op 'linear' has no attr 'inti'" in str(e) and "did you mean 'init'" in str(e)
    e = error_of(bad("weight_decay = 0.01", "weight_decy = 0.01"))
    assert e.where == "<spec>:17:42" and "did you mean 'weight_decay'?" in str(e)


def test_misspelled_op_points_at_the_node():
    e = error_of(bad('"linear"', '"linaer"'))
    assert e.where == "<spec>:9:10"
    assert "unknown op 'linaer'" in str(e)
    assert e.diagnostic.hint == "did you mean 'linear'?"


@pytest.mark.parametrize("old,new,where,words", [
    ('"adamw"', '"adamm"', "<spec>:17:22", ["unknown optimizer 'adamm'", "'adam'", "'adamw'"]),
    ('"cross_entropy"', '"cross_entropi"', "<spec>:16:8", ["unknown loss", "did you mean 'cross_entropy'?"]),
    ('"accuracy"', '"acuracy"', "<spec>:23:12", ["unknown metric 'acuracy'", "did you mean 'accuracy'"]),
    ('"cosine"', '"cosin"', "<spec>:18:22", ["unknown scheduler", "'cosine'"]),
    ('"kaiming_normal"', '"kaiming_normall"', "<spec>:9:38", ["unknown init", "'kaiming_normal'"]),
    ('"digits"', '"digit"', "<spec>:4:11", ["dataset 'digit'", "did you mean 'digits'?"]),
    ('determinism = "debug"', 'determinism = "debugg"', "<spec>:24:15", ["did you mean 'debug'?"]),
    ('"fp32"', '"fp16"', "<spec>:21:13", ["unknown precision 'fp16'", "'f16'"]),
])
def test_misspelled_catalog_names(old, new, where, words):
    e = error_of(bad(old, new))
    assert e.where == where
    for w in words:
        assert w in str(e), (w, str(e))


def test_peft_and_plan_names():
    e = error_of(EXAMPLE + 'peft = { method = "lorra" }\n')
    assert e.where == "<spec>:26:19" and "did you mean 'lora'" in str(e)
    e = error_of(EXAMPLE + '[plan]\ndevice = "gpu"\n')
    assert e.where == "<spec>:27:10" and "did you mean 'wgpu'?" in str(e)
    e = error_of(EXAMPLE + '[plan]\nmemory = "lots"\n')
    assert e.where == "<spec>:27:10" and "8GiB" in str(e)


# ---- wrong types and ranges -------------------------------------------------------------------------------
@pytest.mark.parametrize("old,new,where,words", [
    ("batch_size = 64", 'batch_size = "64"', "<spec>:20:14",
     ["recipe.batch_size must be an integer", '"64"', "a string", "write batch_size = 64"]),
    ("lr = 3e-3", "lr = -1", "<spec>:17:36", ["recipe.optimizer.lr must be in (0, 100]", "got -1"]),
    ("p = 0.1", "p = 1.5", "<spec>:11:25", ["model.nodes[2].p must be in [0, 1)", "got 1.5"]),
    ("out = 10 }", "out = 0 }", "<spec>:12:43", ["model.nodes[3].out must be between 1 and 16777216", "got 0"]),
    ("out = 128", "out = -5", "<spec>:9:26", ["model.nodes[0].out", "got -5"]),
    ("out = 128", "out = 1000000000000", "<spec>:9:26", ["16777216", "1000000000000"]),
    ("out = 128", "out = 128.0", "<spec>:9:26", ["must be an integer", "a float", "write out = 128"]),
    ("epochs = 3", "epochs = 2.5", "<spec>:19:10", ["recipe.epochs must be an integer", "2.5"]),
    ("clip_grad_norm = 1.0", 'clip_grad_norm = "1"', "<spec>:22:18", ["must be a number", "(no quotes)"]),
    ("seed = 0", "seed = -1", "<spec>:25:8", ["recipe.seed", "got -1"]),
    ("seed = 0", "seed = true", "<spec>:25:8", ["must be an integer", "a boolean"]),
    ('metrics = ["accuracy", "f1"]', 'metrics = "accuracy, f1"', "<spec>:23:11", ["unknown metric"]),
    ("warmup_steps = 20", "warmup_steps = -20", "<spec>:18:47", ["warmup_steps", "-20"]),
])
def test_wrong_types_and_ranges(old, new, where, words):
    e = error_of(bad(old, new))
    assert e.where == where, str(e)
    for w in words:
        assert w in str(e), (w, str(e))


def test_wrong_structure():
    e = error_of('recipe = 3\n[model]\ninput = { shape = [4] }\nnodes = [{ op = "relu" }]\n')
    assert e.where == "<spec>:1:10" and "recipe must be a table, got 3 (an integer)" in str(e)
    e = error_of('[model]\ninput = { shape = [4] }\nnodes = 3\n')
    assert e.where == "<spec>:3:9" and "non-empty array" in str(e)
    e = error_of('[model]\ninput = { shape = [4] }\nnodes = [{ op = "add", in = 3 }]\n')
    assert e.where == "<spec>:3:29" and "node name or an array of names" in str(e)
    e = error_of('[model]\ninput = { shape = [4] }\nnodes = [{ op = "linear" }]\n')
    assert e.where == "<spec>:3:10" and "op 'linear' needs attr 'out'" in str(e)
    e = error_of('[model]\ninput = { shape = [4] }\nnodes = [{ out = 3 }]\n')
    assert e.where == "<spec>:3:10" and "needs 'op'" in str(e)
    e = error_of('[model]\ninput = { shape = [1, 8, 8] }\nnodes = [{ op = "conv2d", out = 2, kernel = [3, 0] }]\n')
    assert e.where == "<spec>:3:49" and "kernel" in str(e)
    e = error_of('[model]\ninput = { shape = [0] }\nnodes = [{ op = "relu" }]\n')
    assert e.where == "<spec>:2:20"
    e = error_of('[model]\nnodes = [{ op = "relu" }]\n')
    assert e.where == "<spec>:1:2" and "input shape is unknown" in str(e)
    e = error_of('[data]\ndataset = "digits"\nn_features = 3\n[model]\nnodes = [{ op = "relu" }]\n')
    assert e.where == "<spec>:3:1" and "synthetic datasets only" in str(e)


def test_split_must_be_fractions_summing_to_one():
    e = error_of(bad("test = 0.1 }", "test = 0.2 }"))
    assert e.where == "<spec>:5:9"
    assert "split fractions must sum to 1" in str(e) and "1.1" in str(e)
    e = error_of(bad("val = 0.1", "val = 0"))
    assert e.where == "<spec>:5:30" and "data.split.val must be in (0, 1]" in str(e)
    e = error_of(bad("val = 0.1", "valid = 0.1"))
    assert e.where == "<spec>:5:24" and "did you mean 'val'?" in str(e)
    # within 1e-6 is fine
    Spec.from_text(bad("test = 0.1 }", "test = 0.1000005 }"))
    Spec.from_text(bad("split = { train = 0.8, val = 0.1, test = 0.1 }", "split = { train = 1.0 }"))


# ---- graph errors -----------------------------------------------------------------------------------------
RESIDUAL_BAD_IN = '''[model]
input = { shape = [16] }
nodes = [
  { name = "h1", op = "linear", out = 16 },
  { name = "a", op = "relu" },
  { name = "h2", op = "add", in = ["a", "xx"] },
]
'''

CYCLE = '''[model]
input = { shape = [8] }
nodes = [
  { name = "a", op = "linear", out = 8, in = "c" },
  { name = "b", op = "relu" },
  { name = "c", op = "add", in = ["b", "x"] },
]
'''

DUPLICATE = '''[model]
input = { shape = [8] }
nodes = [
  { name = "h", op = "linear", out = 8 },
  { name = "h", op = "relu" },
]
'''

SHAPES = '''[model]
input = { shape = [64] }
nodes = [
  { name = "h1", op = "linear", out = 32 },
  { name = "h2", op = "add", in = ["h1", "x"] },
]
'''


def test_unknown_input_name():
    e = error_of(RESIDUAL_BAD_IN)
    assert e.where == "<spec>:6:41"
    assert "node 'h2' takes input 'xx', but no node has that name" in str(e)
    assert "did you mean 'x'?" in e.diagnostic.hint


def test_cycle():
    e = error_of(CYCLE)
    assert e.where == "<spec>:4:3"
    assert e.diagnostic.message == "nodes form a cycle: 'a' -> 'b' -> 'c' -> 'a'"
    e = error_of('[model]\ninput = { shape = [8] }\nnodes = [{ name = "s", op = "add", in = ["s", "x"] }]\n')
    assert e.where == "<spec>:3:10" and "'s' -> 's'" in str(e)


def test_duplicate_and_reserved_names():
    e = error_of(DUPLICATE)
    assert e.where == "<spec>:5:12"
    assert "duplicate node name 'h'" in str(e) and "first defined at <spec>:4:12" in str(e)
    e = error_of('[model]\ninput = { shape = [8] }\nnodes = [{ name = "x", op = "relu" }]\n')
    assert e.where == "<spec>:3:19" and "reserved" in str(e)
    e = error_of('[model]\ninput = { shape = [8] }\nnodes = [{ name = "a.b", op = "relu" }]\n')
    assert e.where == "<spec>:3:19" and "must start with a letter" in str(e)


def test_shape_conflict_in_add_names_both_shapes():
    e = error_of(SHAPES)
    assert e.where == "<spec>:5:3"
    assert e.diagnostic.message == ("node 'h2' (op 'add', inputs 'h1' [32]:f32, x [64]:f32): "
                                    "add needs inputs of one shape, got (32,) and (64,)")
    assert e.diagnostic.details["kind"] == "shape"


def test_output_must_name_a_node():
    e = error_of(SHAPES.replace('input = { shape = [64] }', 'input = { shape = [32] }')
                 .replace('nodes = [', 'output = "h3"\nnodes = ['))
    assert e.where == "<spec>:3:10" and "output 'h3' names no node" in str(e) and "'h2'" in str(e)


def test_embedding_needs_integer_input_hint():
    e = error_of('[model]\ninput = { shape = [8] }\n'
                 'nodes = [{ op = "linear", out = 4 }, { op = "embedding", vocab = 3, dim = 2 }]\n')
    assert "needs integer token ids" in str(e) and e.where == "<spec>:3:38"
    e = error_of('[model]\ninput = { shape = [8], dtype = "i32" }\nnodes = [{ op = "linear", out = 4 }]\n')
    assert "floating-point" in str(e) and "embedding" in e.diagnostic.hint


# ---- all diagnostics --------------------------------------------------------------------------------------
def test_check_returns_all_in_text_order_and_from_text_raises_the_first():
    text = bad('"linear"', '"linaer"')
    text = bad("batch_size = 64", 'batch_size = "64"', text)
    text = bad("[model]", "[model]\ncolor = 3", text)
    text = bad("epochs = 3", "epochs = 0", text)
    diags = Spec.check(text)
    assert [d.where for d in diags] == ["<spec>:8:1", "<spec>:10:10", "<spec>:20:10", "<spec>:21:14"]
    assert "unknown key 'color'" in diags[0].message
    e = error_of(text)
    assert e.where == "<spec>:8:1"
    assert [d.where for d in e.diagnostics] == [d.where for d in diags]
    assert Spec.check(EXAMPLE) == []


# ---- files and datasets -----------------------------------------------------------------------------------
def test_from_file_and_missing_file(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text(bad("[model]", "[modle]"))
    e = pytest.raises(SpecError, Spec.from_file, p).value
    assert e.where == f"{p}:7:2"
    p.write_text(EXAMPLE)
    assert Spec.from_file(p).source == str(p)
    missing = tmp_path / "nope.toml"
    e = pytest.raises(SpecError, Spec.from_file, missing).value
    assert str(missing) in str(e) and e.where == str(missing)


def test_dataset_path_missing_and_present(tmp_path):
    text = bad('"digits"', '"data/train.npz"')
    e = error_of(text)
    assert e.where == "<spec>:4:11"
    assert "data/train.npz" in str(e) and "neither a built-in dataset nor an existing file" in str(e)
    (tmp_path / "data").mkdir()
    x = np.zeros((20, 64), np.float32)
    y = np.arange(20) % 10
    np.savez(tmp_path / "data" / "train.npz", x=x, y=y)
    (tmp_path / "exp.toml").write_text(text)
    s = Spec.from_file(tmp_path / "exp.toml")
    assert s.dataset.n_rows == 20 and s.dataset.feature_shape == (64,) and s.dataset.n_classes == 10
    assert s.graph.output_shape == (10,)


def test_builtin_dataset_info():
    assert dataset_info("digits") == dataset_info("digits")
    d = dataset_info("digits")
    assert (d.n_rows, d.feature_shape, d.feature_dtype, d.n_classes, d.task) == (1797, (64,), "f32", 10,
                                                                                 "classification")
    assert (dataset_info("iris").n_rows, dataset_info("iris").feature_shape, dataset_info("iris").n_classes) == \
        (150, (4,), 3)
    assert (dataset_info("wine").n_rows, dataset_info("wine").feature_shape) == (178, (13,))
    assert (dataset_info("breast_cancer").n_rows, dataset_info("breast_cancer").n_classes) == (569, 2)
    s = dataset_info("synthetic_classification", {"n_rows": 50, "n_features": 3, "n_classes": 4})
    assert (s.n_rows, s.feature_shape, s.n_classes, s.task) == (50, (3,), 4, "classification")
    assert dataset_info("synthetic_regression").task == "regression"
    assert set(KNOWN["dataset"]) >= {"digits", "iris", "wine", "breast_cancer", "pydoc_topics"}


def test_pydoc_topics_measured_from_the_text():
    import pydoc_data.topics as t
    text = pydoc_text()
    assert len(text) == sum(len(v) for v in t.topics.values()) + 2 * (len(t.topics) - 1)
    info = dataset_info("pydoc_topics", {"seq_len": 64})
    assert info.n_rows == (len(text) - 1) // 64
    assert info.feature_shape == (64,) and info.feature_dtype == "i32" and info.task == "lm"
    assert info.n_classes == len(pydoc_vocab()) == 96 and set(text) <= set(pydoc_vocab())   # fixed vocabulary
    assert dataset_info("pydoc_topics").feature_shape == (128,)


@pytest.mark.parametrize("name,loader", [("digits", "load_digits"), ("iris", "load_iris"), ("wine", "load_wine"),
                                         ("breast_cancer", "load_breast_cancer")])
def test_tabular_sizes_match_scikit_learn(name, loader):
    datasets = pytest.importorskip("sklearn.datasets")
    b = getattr(datasets, loader)()
    info = dataset_info(name)
    assert info.n_rows == b.data.shape[0]
    assert info.feature_shape == b.data.shape[1:]
    assert info.n_classes == len(np.unique(b.target))


def test_known_tables_are_complete():
    assert len(KNOWN["optimizer"]) == 9 and "int8adam" in KNOWN["optimizer"]
    assert len(KNOWN["loss"]) == 16 and len(KNOWN["scheduler"]) == 14 and len(KNOWN["metric"]) == 10
    assert len(KNOWN["init"]) == 13 and len(KNOWN["peft"]) == 6 and len(KNOWN["dataset"]) == 9
    assert math.isclose(sum(Spec.from_text(EXAMPLE).data["split"].values()), 1.0)


def test_model_must_fit_its_data_classes_and_vocabulary():
    mlp = '[data]\ndataset = "digits"\n[model]\nnodes = [\n  { op = "linear", out = 12 },\n]\n'
    diags = Spec.check(mlp)
    assert len(diags) == 1 and diags[0].where == "<spec>:5:3"
    assert "outputs 12 classes but there are 10 classes in dataset 'digits'" in diags[0].message
    assert "out = 10" in diags[0].hint
    lm = ('[data]\ndataset = "pydoc_topics"\nseq_len = 8\n[model]\nnodes = [\n'
          '  { op = "embedding", vocab = 50, dim = 8 },\n  { op = "linear", out = 96 },\n]\n')
    (d,) = Spec.check(lm)
    assert d.where == "<spec>:6:31" and "embedding vocab 50 is smaller than the 96 token ids" in d.message
    assert Spec.check(mlp.replace("out = 12", "out = 10")) == []
    assert Spec.check(mlp.replace("out = 12", "out = 1") + '[recipe]\nloss = "mse"\n') == []



def test_data_placement_and_memory_budget():
    s = Spec.from_text(EXAMPLE.replace('dataset = "digits"', 'dataset = "digits"\nplacement = "device"\n'
                                       'memory_budget = "2MiB"'))
    assert s.data["placement"] == "device" and s.data["memory_budget"] == 2 ** 20 * 2
    e = error_of(EXAMPLE.replace('dataset = "digits"', 'dataset = "digits"\nplacement = "devise"'))
    assert e.where == "<spec>:5:13" and "did you mean 'device'" in str(e)
    e = error_of(EXAMPLE.replace('dataset = "digits"', 'dataset = "digits"\nmemory_budget = "lots"'))
    assert e.where == "<spec>:5:17" and "64MiB" in str(e)


def test_from_file_reads_the_file_and_binds_in_memory_data(tmp_path):
    """A spec file is read as its bytes; `data=` binds in-memory parts (the two never mix)."""
    import numpy as np
    f = tmp_path / "s.toml"
    f.write_text('[data]\ndataset = "digits"\n[model]\nnodes = [{ op = "linear", out = 10 }]\n')
    assert Spec.from_file(f).hash == Spec.from_text(f.read_text()).hash
    g = tmp_path / "m.toml"
    g.write_text('[model]\nnodes = [{ op = "linear", out = 3 }]\n')
    X, y = np.random.default_rng(0).standard_normal((20, 4)), np.arange(20) % 3
    s = Spec.from_file(g, data={"train": (X, y)})
    assert s.input["shape"] in ([4], (4,))
