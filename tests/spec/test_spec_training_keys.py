"""The recipe's catalog keys: loss (name or table), regularizers, augment, sampling, and optimizers named
from the registry (user entries included), each bad input reported at its line:col with did-you-mean.

Positions are found in the texts below by searching for the offending text (line and column counted
from 1), so each assertion pins the exact spot the message points at.
"""
from __future__ import annotations

import textwrap

import pytest

from scellis_jupyter import catalog
from scellis_jupyter.spec import Spec, SpecError

BASE = """name = "t"
[data]
dataset = "{dataset}"
[model]
nodes = [{{ name = "fc1", op = "linear", out = 32 }}, {{ op = "relu" }}, {{ name = "out", op = "linear", out = {out} }}]
[recipe]
{recipe}
"""


def spec_text(recipe, dataset="digits", out=10):
    return BASE.format(dataset=dataset, out=out, recipe=textwrap.dedent(recipe).strip())


def pos(text, needle, nth=0):
    """1-based line:col of the nth occurrence of needle in the [recipe] section."""
    if isinstance(needle, tuple):
        needle, nth = needle
    i = text.index("[recipe]")
    for _ in range(nth + 1):
        i = text.index(needle, i + 1)
    line = text.count("\n", 0, i) + 1
    return f"{line}:{i - text.rfind(chr(10), 0, i)}"


def error(recipe, **kw):
    text = spec_text(recipe, **kw)
    with pytest.raises(SpecError) as e:
        Spec.from_text(text, source="s.toml")
    return text, e.value


def test_loss_as_a_name_or_a_table():
    s = Spec.from_text(spec_text('loss = { name = "cross_entropy", label_smoothing = 0.1, weight = '
                                 '[1, 1, 1, 1, 1, 1, 1, 1, 1, 2] }'))
    assert s.recipe["loss"] == "cross_entropy"
    assert s.recipe["loss_params"] == {"label_smoothing": 0.1, "weight": (1.0,) * 9 + (2.0,)}
    s = Spec.from_text(spec_text('loss = "huber"', dataset="synthetic_regression", out=1))
    assert (s.recipe["loss"], s.recipe["loss_params"]) == ("huber", {})


@pytest.mark.parametrize("recipe,needle,msg,hint", [
    ('loss = "hubber"', '"hubber"', "unknown loss 'hubber'", "did you mean 'huber'"),
    ('loss = { name = "crossentropy" }', '"crossentropy"', "unknown loss 'crossentropy'",
     "did you mean 'cross_entropy'"),
    ('loss = { name = "cross_entropy", label_smothing = 0.1 }', "label_smothing",
     "loss 'cross_entropy' has no parameter 'label_smothing'", "did you mean 'label_smoothing'"),
    ('loss = { name = "cross_entropy", label_smoothing = 1.5 }', "1.5", "out of range [0, 1]", ""),
    ('loss = { name = "focal", gamma = "two" }', '"two"', "gamma='two' is not a float", ""),
    ('loss = { name = "cross_entropy", reduction = "none" }', '"none"', "training needs a number", "mean"),
    ('loss = { label_smoothing = 0.1 }', "{ label", "needs 'name'", ""),
])
def test_bad_losses_point_at_the_spot(recipe, needle, msg, hint):
    text, e = error(recipe)
    assert e.where == f"s.toml:{pos(text, needle)}", (e.where, str(e))
    assert msg in e.diagnostic.message, e.diagnostic.message
    assert hint in e.diagnostic.hint


def test_the_loss_must_read_the_models_output():
    text, e = error('loss = { name = "cross_entropy", weight = [1.0, 2.0] }')
    assert e.where == f"s.toml:{pos(text, '{ name')}" and "weight has 2 values for 10 classes" in str(e)
    text, e = error('loss = "info_nce"')
    assert "[2, D] per example" in str(e)


def test_model_vs_data_asks_the_loss_entry():
    # class-id losses are checked against the dataset's classes ...
    for loss in ('"cross_entropy"', '"multi_margin"', '{ name = "focal", gamma = 1.0 }', '"nll"'):
        text, e = error(f"loss = {loss}", out=7)
        assert "outputs 7 classes but there are 10" in str(e), loss
    # ... same-shape and binary targets are not
    Spec.from_text(spec_text('loss = "bce_with_logits"', dataset="breast_cancer", out=1))
    Spec.from_text(spec_text('loss = { name = "focal", mode = "sigmoid" }', dataset="breast_cancer", out=1))


def test_regularizers_augment_sampling_validate():
    s = Spec.from_text(spec_text('''
        regularizers = [{ name = "mixup", alpha = 0.3 }, "weight_decay", { name = "spectral_norm", layers = ["fc1"] }]
        augment = [{ name = "gaussian_noise", std = 0.1 }, "hflip"]
        sampling = "balanced"
    ''').replace('nodes = [', 'input = { shape = [1, 8, 8], dtype = "f32" }\nnodes = [{ op = "flatten" }, '))
    assert s.recipe["regularizers"] == [{"name": "mixup", "alpha": 0.3}, {"name": "weight_decay"},
                                        {"name": "spectral_norm", "layers": ["fc1"]}]
    assert s.recipe["augment"] == [{"name": "gaussian_noise", "std": 0.1}, {"name": "hflip"}]
    assert s.recipe["sampling"] == "balanced"
    s = Spec.from_text(spec_text("sampling = { class_weights = [1, 1, 1, 1, 1, 1, 1, 1, 1, 5] }"))
    assert s.recipe["sampling"] == {"class_weights": [1.0] * 9 + [5.0]}


@pytest.mark.parametrize("recipe,needle,msg,hint", [
    ('regularizers = [{ name = "mixpu" }]', '"mixpu"', "unknown regularizer 'mixpu'", "did you mean 'mixup'"),
    ('regularizers = [{ name = "mixup", alpha = 0 }]', "0 }", "alpha=0.0 is out of range (0, inf)", ""),
    ('regularizers = [{ name = "mixup", alpah = 0.2 }]', "alpah", "has no parameter 'alpah'", "did you mean 'alpha'"),
    ('regularizers = ["mixup", "mixup"]', ('"mixup"', 1), "listed twice", ""),
    ('regularizers = { name = "mixup" }', "{", "must be an array", ""),
    ('regularizers = [{ name = "spectral_norm", layers = ["fc3"] }]', '{ name = "spectral_norm"',
     "layer 'fc3' is not a node", "did you mean 'fc1'"),
    ('loss = "mse"\nregularizers = [{ name = "label_smoothing" }]', '{ name = "label_smoothing"',
     "'mse' has none", "cross_entropy"),
    ('augment = [{ name = "gausian_noise" }]', '"gausian_noise"', "unknown augmentation", "did you mean 'gaussian_noise'"),
    ('augment = [{ name = "gaussian_noise", std = -0.1 }]', "-0.1", "out of range", ""),
    ('augment = [{ name = "hflip" }]', '{ name = "hflip"', "needs images", "[1, 8, 8]"),
    ('sampling = "balansed"', '"balansed"', "unknown sampling 'balansed'", "did you mean 'balanced'"),
    ('sampling = { class_weights = [1, 2] }', "[1, 2]", "2 class weights for the 10 classes", ""),
    ('sampling = { class_weights = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0] }', "[0,", "not all 0", ""),
    ('sampling = { weights = [1] }', "weights", "unknown key 'weights'", "did you mean 'class_weights'"),
])
def test_bad_training_keys_point_at_the_spot(recipe, needle, msg, hint):
    text, e = error(recipe)
    assert e.where == f"s.toml:{pos(text, needle)}", (e.where, str(e))
    assert msg in e.diagnostic.message, e.diagnostic.message
    assert hint in e.diagnostic.hint


def test_balanced_sampling_needs_classes():
    text, e = error('loss = "mse"\nsampling = "balanced"', dataset="synthetic_regression", out=1)
    where = pos(text, '"balanced"')
    assert "needs class labels" in str(e) and e.where == f"s.toml:{where}"


# ---- user entries are spec names like built-ins ------------------------------------------------------------
USER = '''
from scellis_jupyter.catalog import Param, StateDecl, optimizer
from scellis_jupyter.graph import functional as F


@optimizer("spec_user_sgd", params={"lr": Param(float, 0.01, lo=0.0, lo_open=True),
                                    "beta": Param(float, 0.9, lo=0.0, hi=1.0, hi_open=True)})
class S:
    def __init__(self, lr=0.01, beta=0.9):
        self.lr, self.beta = lr, beta

    def state(self, shape, dtype):
        return []

    def update(self, p, g, state, step, lr):
        return F.sub(p, F.mul(F.cast(lr, p.dtype), g)), {}
'''


def test_user_optimizer_in_a_spec(clean_registry):
    with pytest.raises(SpecError, match="unknown optimizer 'spec_user_sgd'"):
        Spec.from_text(spec_text('optimizer = { name = "spec_user_sgd", beta = 0.5 }'))
    catalog.load_source(USER, "spec-user", check=True)
    s = Spec.from_text(spec_text('optimizer = { name = "spec_user_sgd", lr = 0.1, beta = 0.5 }'))
    assert s.recipe["optimizer"]["beta"] == 0.5
    text, e = error('optimizer = { name = "spec_user_sgd", beta = 1.5 }')
    assert e.where == f"s.toml:{pos(text, '1.5')}" and "out of range [0, 1)" in str(e)
    text, e = error('optimizer = { name = "spec_user_sgd", btea = 0.5 }')
    assert "did you mean 'beta'" in str(e)
    text, e = error('optimizer = { name = "spec_usr_sgd" }')
    assert "did you mean 'spec_user_sgd'" in str(e)
