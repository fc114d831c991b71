"""Value tests for the scaling calculators and the spec readers (HF configs, model lookup, GPUs,
clusters), written for mutants no earlier test caught (docs/mutation.md). Oracles: transformers'
config-class defaults (configuration_*.py), the published coefficients of Besiroglu et al. 2024,
hand arithmetic, numpy's percentile definition, difflib, and the documented CLI behaviour
(docs/cli.md, docs/scaling.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from mlsyscalc.calc.scaling.calculators import BudgetOptions, budget, optimal
from mlsyscalc.calc.scaling.fit import FitOptions, Runs, _grid, _interval, _starts, fit_runs
from mlsyscalc.calc.scaling.laws import Parametric, laws
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import builtin_clusters
from mlsyscalc.specs.gpu import load_gpu
from mlsyscalc.specs.hf import from_hf_config
from mlsyscalc.specs.lookup import builtin_configs, load_model, suggest


def _without(model: str, *keys: str, **extra) -> dict:
    """A built-in config.json with `keys` removed (a config written before the key existed)."""
    raw = {k: v for k, v in builtin_configs()[model].items() if not k.startswith("_") and k not in keys}
    return raw | extra


def _spec(raw: dict):
    return from_hf_config(raw, name="test", source="test")


# --- HF config defaults of missing keys (transformers' config classes) ---------------------------------

def test_qwen2_phi3_phi_without_tie_key_keep_an_untied_head():
    """Qwen2Config, Phi3Config and PhiConfig all default tie_word_embeddings to False: a config.json
    without the key has a separate lm_head (vocab x hidden more parameters than a tied one)."""
    for model in ("qwen2.5-7b", "phi3-mini", "phi-2"):
        assert _spec(_without(model, "tie_word_embeddings")).tie_word_embeddings is False, model
    # the key, when present, wins: Qwen2.5-0.5B's config.json ties
    assert _spec(_without("qwen2.5-0.5b")).tie_word_embeddings is True


def test_deepseek_v3_missing_attention_bias_and_moe_layer_freq():
    """DeepseekV3Config: attention_bias=False and (older remote code) moe_layer_freq=1, every layer after
    the first_k_dense_replace dense ones is MoE."""
    spec = _spec(_without("deepseek-v3", "attention_bias", "moe_layer_freq"))
    assert spec.o_bias is False
    assert spec.moe.layer_freq == 1
    assert spec.moe.first_dense_layers == 3  # DeepSeek-V3's config.json: first_k_dense_replace 3


def test_falcon_defaults_of_missing_architecture_bias_and_alibi_keys():
    """FalconConfig: new_decoder_architecture=False, multi_query=True, bias=False, alibi=False. Without
    the first key Falcon-7B keeps one shared K/V head (multi-query), not one per query head (71); without
    bias and alibi it has no linear biases and rotary positions."""
    spec = _spec(_without("falcon-7b", "new_decoder_architecture", "bias", "alibi"))
    assert spec.num_heads == 71 and spec.num_kv_heads == 1
    assert (spec.qkv_bias, spec.o_bias, spec.mlp_bias) == (False, False, False)
    assert spec.position_embedding == "rope"
    with_alibi = _spec(_without("falcon-7b", alibi=True, bias=True))
    assert with_alibi.position_embedding == "alibi" and with_alibi.qkv_bias is True


def test_dtype_read_from_torch_dtype_or_the_newer_dtype_key():
    """transformers >= 4.56 writes `dtype` where older versions wrote `torch_dtype`; either names the
    checkpoint's dtype (llama2-7b's config.json: float16)."""
    assert load_model("llama2-7b").torch_dtype == "float16"
    assert _spec(_without("llama2-7b", "torch_dtype", dtype="bfloat16")).torch_dtype == "bfloat16"
    assert _spec(_without("llama2-7b", "torch_dtype")).torch_dtype is None


# --- model lookup: suggestions and path-like names (docs/cli.md) ---------------------------------------

def test_suggest_offers_at_most_three_close_names():
    """difflib.get_close_matches with n=3: of five names one letter from the word, three are offered."""
    names = ["abce", "abcf", "abcg", "abch", "abci"]
    got = suggest("abcd", names)
    assert got.startswith(" (did you mean: ") and got.endswith("?)")
    assert len(got[len(" (did you mean: "):-2].split(", ")) == 3


def test_suggest_falls_back_to_substrings_both_ways():
    """Below difflib's 0.5 cutoff ('x' vs 'xlonglongname': ratio 2/14) a name containing the word, or
    contained in it, is still offered, in its own spelling; unrelated names are not."""
    assert suggest("x", ["XLongLongName", "other"]) == " (did you mean: XLongLongName?)"
    word = "my-own-finetune-of-llama2-7b-v2"  # ratio vs 'llama2-7b': 2*9/40 < 0.5
    assert suggest(word, ["llama2-7b", "gpt2-xl"]) == " (did you mean: llama2-7b?)"
    assert suggest("zzz", ["abc", "def"]) == ""


@pytest.mark.parametrize("ref", ["no/such/dir", "missing.JSON", "./missing", "a\\b"])
def test_path_like_missing_model_says_no_such_file(ref):
    """docs/cli.md: a path (`/`, `\\`, `.json`, leading `.`) that does not exist is 'no such file or
    folder', not an unknown built-in name."""
    with pytest.raises(MlsysError, match="no such file or folder"):
        load_model(ref)


def test_plain_unknown_name_says_unknown_model():
    with pytest.raises(MlsysError, match="unknown model 'llama9'"):
        load_model("llama9")


# --- GPU and cluster specs -----------------------------------------------------------------------------

def test_gpu_spec_extra_is_neither_compared_nor_shown():
    """`extra` (free-form) takes no part in equality or repr: two specs with the same figures are the
    same card, and a spec's repr stays the datasheet."""
    gpu = load_gpu("H100-SXM")
    other = replace(gpu, extra={"note": "measured"})
    assert gpu == other
    assert other != replace(gpu, memory_bytes=gpu.memory_bytes + 1)
    assert "extra" not in repr(other) and "measured" not in repr(other)


def test_with_links_on_a_single_node_box_adds_no_inter_node_link():
    """h200-x2-measured has no inter-node link; changing only the intra-node bandwidth keeps it so,
    and the intra link's bandwidth is the new 100 GB/s = 1e11 B/s."""
    box = builtin_clusters()["h200-x2-measured"]
    assert box.inter is None
    changed = box.with_links(bandwidth_GBps=100.0)
    assert changed.inter is None
    assert changed.intra.bandwidth_Bps == 1e11
    added = box.with_links(inter_latency_us=5.0)
    assert added.inter is not None and added.inter.latency_s == pytest.approx(5e-6, rel=1e-12, abs=0)


# --- scaling budget and laws -----------------------------------------------------------------------------

def test_budget_default_mfu_is_forty_percent():
    """docs/scaling.md: MFU defaults to 0.4. 1e24 FLOP on a 1e15 FLOP/s card: 1e24 / (1e15 x 0.4) / 3600
    = 694,444.4 GPU-hours."""
    assert BudgetOptions().mfu == 0.4
    got = budget(1e15, compute_flops=1e24)
    assert got.mfu == 0.4
    assert got.gpu_hours == pytest.approx(1e24 / (1e15 * 0.4) / 3600.0, rel=1e-12, abs=0)


def test_epoch_replication_loss_uses_the_published_coefficients():
    """Besiroglu et al. 2024 (arXiv:2404.10102), eq. 5: E = 1.8172, A = 482.01, B = 2085.43,
    alpha = 0.3478, beta = 0.3658. At N = 1e9, D = 2e10: L = 1.8172 + 482.01/1e9^0.3478 +
    2085.43/2e10^0.3658."""
    expected = 1.8172 + 482.01 / 1e9**0.3478 + 2085.43 / 2e10**0.3658
    law = laws()["epoch"]
    assert law.parametric.loss(1e9, 2e10) == pytest.approx(expected, rel=1e-12, abs=0)
    assert "1.8172" in law.how
    point = optimal("epoch", params=1e9)  # the loss of `mlsys scaling optimal --law epoch`
    assert point.loss.irreducible == 1.8172
    by_hand = 1.8172 + 482.01 / point.params**0.3478 + 2085.43 / point.tokens**0.3658
    assert point.loss.total == pytest.approx(by_hand, rel=1e-12, abs=0)


# --- fitting L(N, D) to runs -----------------------------------------------------------------------------

TRUE = Parametric(E=1.8, A=450.0, B=1800.0, alpha=0.34, beta=0.37)


def _runs() -> Runs:
    """An IsoFLOP design: 4 budgets x 5 sizes spaced 10^0.5 around each optimum, noise-free losses."""
    params, tokens, loss = [], [], []
    for c in (1e18, 1e19, 1e20, 1e21):
        for f in (0.1, 10**-0.5, 1.0, 10**0.5, 10.0):
            n = TRUE.k * c**TRUE.a * f
            d = c / (6 * n)
            params.append(n)
            tokens.append(d)
            loss.append(TRUE.loss(n, d))
    return Runs(tuple(params), tuple(tokens), tuple(loss))


def test_interval_is_the_central_percentile_range():
    """A ci of 0.9 keeps 5% in each tail: numpy's linear percentiles of 0..100 are exactly 5 and 95;
    of 0.5, 25 and 75."""
    samples = np.arange(101, dtype=float)
    assert _interval(samples, 0.9) == pytest.approx((5.0, 95.0), rel=1e-12, abs=0)
    assert _interval(samples, 0.5) == pytest.approx((25.0, 75.0), rel=1e-12, abs=0)


@pytest.mark.parametrize("ci", [0.0, 1.0, 1.5, -0.2])
def test_confidence_level_outside_zero_one_is_refused(ci):
    """docs/scaling.md: --ci must be in (0, 1)."""
    with pytest.raises(MlsysError, match=r"confidence level must be in \(0, 1\)"):
        fit_runs(_runs(), FitOptions(starts=10, bootstrap=0, ci=ci))


def test_default_compute_is_the_largest_run_and_any_positive_budget_is_taken():
    """docs/scaling.md: the implied optimum is at the largest 6ND among the runs by default; the
    designed budgets are 1e18..1e21, so the largest is 1e21 (up to rounding of N x D)."""
    runs = _runs()
    largest = max(6 * n * d for n, d in zip(runs.params, runs.tokens))
    fast = FitOptions(starts=20, bootstrap=0)
    got = fit_runs(runs, fast)
    assert got.compute_flops == largest
    assert got.compute_flops == pytest.approx(1e21, rel=1e-9, abs=0)
    small = fit_runs(runs, fast, compute_flops=0.5)  # tiny, but a budget
    assert small.compute_flops == 0.5
    assert small.optimal_params * small.optimal_tokens * 6 == pytest.approx(0.5, rel=1e-9, abs=0)
    for bad in (0.0, -1e20):
        with pytest.raises(MlsysError, match="compute budget must be positive"):
            fit_runs(runs, fast, compute_flops=bad)


def test_starts_all_or_more_than_the_grid_run_the_whole_grid():
    """docs/scaling.md: the paper's grid has 5 x 5 x 5 x 6 x 6 = 4,500 points; `--starts all` (None) and
    any k of 4,500 or more start from every one of them; k below that gives k starts."""
    grid = _grid()
    assert len(grid) == 5 * 5 * 5 * 6 * 6
    runs = _runs()
    x, y, log_l = (np.log(np.asarray(v)) for v in (runs.params, runs.tokens, runs.loss))
    for k in (None, 4500, 5000):
        assert _starts(grid, x, y, log_l, 1e-3, k, 0) is grid, k
    assert len(_starts(grid, x, y, log_l, 1e-3, 37, 0)) == 37


def test_default_fit_uses_200_starts_and_100_resamples():
    """docs/scaling.md: by default 200 of the 4,500 grid points start the fit and --bootstrap is 100;
    on noise-free runs every resample gives a usable fit, so all 100 count."""
    assert (FitOptions().starts, FitOptions().bootstrap) == (200, 100)
    got = fit_runs(_runs())
    assert got.starts == 200
    assert got.bootstrap == 100
    assert math.isclose(got.fit.alpha, TRUE.alpha, rel_tol=1e-3)


def test_a_start_at_an_exact_optimum_converges_when_lambda_reaches_its_cap():
    """docs/scaling.md's Levenberg-Marquardt: a step is kept only if it lowers the objective; a rejected
    one multiplies lambda by 4 from 1e-3, and a start is converged once lambda reaches 1e12. With A and B
    negligible (log A = log B = -1000) and E = 1 = every loss, every residual is exactly 0: no step can
    lower a zero objective, so lambda grows 1e-3 x 4^k, which first reaches 1e12 at k = 25
    (4^24 = 2.8e14, 4^25 = 1.13e15)."""
    from mlsyscalc.calc.scaling.fit_batch import minimise_many

    assert 1e-3 * 4.0**24 < 1e12 <= 1e-3 * 4.0**25
    x, y = np.log([1e8, 1e9, 1e10]), np.log([1e10, 1e11, 1e12])
    log_l = np.zeros(3)  # L = 1 nat: log L = 0
    start = np.array([[-1000.0, -1000.0, 0.0, 0.3, 0.3]])  # a, b, e, alpha, beta
    for iterations, converged in ((24, False), (25, True)):
        theta, f, done = minimise_many(start, x, y, log_l, 1e-3, max_iterations=iterations)
        assert f[0] == 0.0
        assert theta.tolist() == start.tolist()
        assert bool(done[0]) is converged, iterations
