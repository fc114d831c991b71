"""Parameter counts against transformers' own count (scripts/validate/ground_truth_hf.py, meta device)."""

from __future__ import annotations

import pytest

from mlsyscalc import count_params, load_model
from mlsyscalc.specs.hf import NORMALISERS, TEXT_MODELS, from_hf_config
from mlsyscalc.specs.lookup import builtin_configs

from .conftest import load_data

DOC = load_data("hf_params.json")
HF = DOC["models"]
# every built-in; other sizes of the same families and --set keys (scripts/validate/ground_truth_cases.py
# VARIANTS); the families without a built-in, at their transformers config class's defaults
CASES = {**{name: (lambda n=name: load_model(n)) for name in HF},
         **{key: (lambda c=case: load_model(c["model"], c["overrides"])) for key, case in DOC["variants"].items()},
         **{f"family:{mt}": (lambda c=case, m=mt: from_hf_config(c["config"], name=m, source="hf_params.json"))
            for mt, case in DOC["family_defaults"].items()}}
TRUTH = {**HF, **DOC["variants"], **{f"family:{mt}": c for mt, c in DOC["family_defaults"].items()}}


def test_every_builtin_has_ground_truth():
    assert set(HF) == set(builtin_configs())


def test_ground_truth_covers_every_supported_model_type():
    """Each model_type is checked against transformers: by a built-in, a variant or its class defaults."""
    checked = {load_model(name).model_type for name in HF} | set(DOC["family_defaults"])
    assert checked >= set(NORMALISERS) | set(TEXT_MODELS)
    assert len(set(NORMALISERS) | set(TEXT_MODELS)) >= 22


@pytest.mark.parametrize("key", sorted(CASES))
def test_counts_equal_transformers(key):
    truth = TRUTH[key]
    got = count_params(CASES[key]())
    assert got.total == truth["total_params"]
    assert got.embedding == truth["embedding_params"]
    assert got.lm_head == truth["lm_head_params"]
    assert got.active == truth["active_params"]


@pytest.mark.parametrize("key", sorted(CASES))
def test_breakdown_matches_transformers_module_names(key):
    cats = TRUTH[key]["by_category"]
    got = count_params(CASES[key]()).breakdown
    assert got["embeddings"] == cats["embeddings"] + cats["embedding_projection"]
    for part in ("attention", "mlp", "norms", "lm_head"):
        assert got[part] == cats[part], part


@pytest.mark.parametrize("name, total, active", [
    # Figures quoted in the foundation issue (and the models' own cards).
    ("llama2-7b", 6_738_415_616, 6_738_415_616),
    ("llama2-70b", 68_976_648_192, 68_976_648_192),
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ("deepseek-v3", 671_026_404_352, 37_552_282_624),
    ("gpt2", 124_439_808, 124_439_808),  # nanoGPT prints 124M with the tied head
])
def test_published_counts(name, total, active):
    got = count_params(load_model(name))
    assert (got.total, got.active) == (total, active)


def test_per_layer_sums_to_layers_total():
    got = count_params(load_model("deepseek-v3"))
    b = got.breakdown
    final_norm = 7168
    assert sum(got.per_layer) == b["attention"] + b["mlp"] + b["norms"] - final_norm
    assert len(got.per_layer) == 61
    assert got.per_layer[0] < got.per_layer[3]  # first 3 layers are dense


def test_tied_head_has_no_params_of_its_own():
    spec = load_model("gpt2")
    assert spec.tie_word_embeddings
    assert count_params(spec).lm_head == 0
    untied = count_params(load_model("gpt2", {"tie_word_embeddings": False}))
    assert untied.total - count_params(spec).total == 50257 * 768
