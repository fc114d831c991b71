"""Value tests of documented outputs of `mlsys serve` and `mlsys scaling`, each against an
independent oracle written out here (hand arithmetic or a published figure), never a number taken
from the code under test.

Serving: a per-iteration host overhead of U = 100 s (docs/serving.md, "Per-iteration host
overhead") dwarfs every kernel (milliseconds), so each iteration lasts U to within 1e-3 relative and
the schedule of a small fixed trace gives TTFT, TPOT, end-to-end, queueing delay, makespan,
throughput and goodput by counting iterations by hand.
"""

from __future__ import annotations

import math

import pytest

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
from mlsyscalc.calc.serve.metrics import Slo
from mlsyscalc.calc.serve.workload import from_trace
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")
CEIL = resolve_ceilings("H100-SXM")
U = 100.0  # seconds of host time per iteration; kernels add < 0.1 s
REL = 2e-3

# A (t=0, 100-token prompt, 4 outputs), B (t=0, 100, 2 outputs), C (t=1.5 U, 100, 1 output)
TRACE = [(0.0, 100, 4), (0.0, 100, 2), (1.5 * U, 100, 1)]


NO_SLO = Slo()


def _run(scheduler, slo=NO_SLO, trace=TRACE, **opts):
    work = from_trace(list(trace), "hand")
    return simulate(SPEC, CEIL, work, ServeOptions(scheduler=scheduler, iteration_overhead_s=U, slo=slo,
                                                    **opts)).metrics


def _pct(values, q):
    """numpy's default linear interpolation between order statistics, by hand."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def test_vllm_prefill_first_schedule_by_hand():
    """vllm (prefill first). it1: prefill A, B (first tokens at 1U). it2: decode A, B (B done at 2U).
    C arrived at 1.5U, so it3 prefills C only (C's one token at 3U). it4, it5: decode A (A done 5U).
    TTFT A=1, B=1, C=1.5; TPOT A=(5-1)/3, B=(2-1)/1; e2e A=5, B=2, C=1.5; queue A=B=0, C=0.5."""
    m = _run("vllm")
    assert m["iterations"] == 5
    assert m["requests"] == 3
    assert m["makespan_s"] == pytest.approx(5 * U, rel=REL)
    ttft = [1 * U, 1 * U, 1.5 * U]
    tpot = [4 / 3 * U, 1 * U]  # C has one output token: no TPOT
    e2e = [5 * U, 2 * U, 1.5 * U]
    queue = [0.0, 0.0, 0.5 * U]
    assert m["ttft_mean_s"] == pytest.approx(sum(ttft) / 3, rel=REL)
    assert m["ttft_p50_s"] == pytest.approx(_pct(ttft, 0.5), rel=REL)
    assert m["ttft_p90_s"] == pytest.approx(_pct(ttft, 0.9), rel=REL)
    assert m["ttft_p99_s"] == pytest.approx(_pct(ttft, 0.99), rel=REL)
    assert m["tpot_mean_s"] == pytest.approx(sum(tpot) / 2, rel=REL)
    assert m["tpot_p50_s"] == pytest.approx(_pct(tpot, 0.5), rel=REL)
    assert m["tpot_p99_s"] == pytest.approx(_pct(tpot, 0.99), rel=REL)
    assert m["e2e_mean_s"] == pytest.approx(sum(e2e) / 3, rel=REL)
    assert m["e2e_p50_s"] == pytest.approx(2 * U, rel=REL)
    assert m["e2e_p90_s"] == pytest.approx(_pct(e2e, 0.9), rel=REL)
    assert m["queue_delay_mean_s"] == pytest.approx(sum(queue) / 3, rel=REL)
    assert m["queue_delay_p99_s"] == pytest.approx(_pct(queue, 0.99), rel=REL)
    assert m["queue_delay_p50_s"] == pytest.approx(0.0, abs=1e-3 * U)
    # rates over the makespan: 3 requests, 4 + 2 + 1 output tokens, 300 prompt tokens in 5 U
    assert m["throughput_requests_per_s"] == pytest.approx(3 / (5 * U), rel=REL)
    assert m["throughput_tokens_per_s"] == pytest.approx(7 / (5 * U), rel=REL)
    assert m["input_tokens_per_s"] == pytest.approx(300 / (5 * U), rel=REL)
    # no SLO: every request counts
    assert m["goodput_requests_per_s"] == pytest.approx(3 / (5 * U), rel=REL)
    assert m["slo_attainment"] == pytest.approx(1.0)
    # the engine is busy from 0 to 2U and from 2U to 5U (C waits only for it2 to end)
    assert m["busy_fraction"] == pytest.approx(1.0, rel=REL)
    # tokens per iteration: 200, 2, 100, 1, 1
    assert m["mean_batch_tokens"] == pytest.approx((200 + 2 + 100 + 1 + 1) / 5, rel=1e-9)
    assert m["preemptions"] == 0


def test_vllm_goodput_under_slo_by_hand():
    """SLO ttft <= 1.2U, tpot <= 1.2U: A fails (TPOT 4/3 U), B meets, C fails (TTFT 1.5 U)."""
    m = _run("vllm", slo=Slo(ttft_s=1.2 * U, tpot_s=1.2 * U))
    assert m["slo_attainment"] == pytest.approx(1 / 3)
    assert m["goodput_requests_per_s"] == pytest.approx(1 / (5 * U), rel=REL)
    # TTFT-only SLO of 1.2 U: A and B meet it
    m = _run("vllm", slo=Slo(ttft_s=1.2 * U))
    assert m["slo_attainment"] == pytest.approx(2 / 3)
    assert m["goodput_requests_per_s"] == pytest.approx(2 / (5 * U), rel=REL)


def test_orca_mixed_iterations_by_hand():
    """orca: every iteration decodes all running requests and prefills new prompts in the same pass.
    it1: prefill A, B (1U). it2: decode A, B (B done 2U). it3: decode A + prefill C (A's 3rd token
    and C's only token at 3U). it4: decode A (done 4U). TPOT A = (4-1)/3 = 1U."""
    m = _run("orca")
    assert m["iterations"] == 4
    assert m["makespan_s"] == pytest.approx(4 * U, rel=REL)
    assert m["ttft_mean_s"] == pytest.approx((1 + 1 + 1.5) / 3 * U, rel=REL)
    assert m["tpot_mean_s"] == pytest.approx(1 * U, rel=REL)
    assert m["e2e_mean_s"] == pytest.approx((4 + 2 + 1.5) / 3 * U, rel=REL)
    assert m["queue_delay_mean_s"] == pytest.approx(0.5 / 3 * U, rel=REL)
    assert m["throughput_tokens_per_s"] == pytest.approx(7 / (4 * U), rel=REL)
    # tokens per iteration: 200, 2, 1 + 100, 1
    assert m["mean_batch_tokens"] == pytest.approx((200 + 2 + 101 + 1) / 4, rel=1e-9)


def test_static_padded_batch_by_hand():
    """static: the engine takes a batch only when empty. A and B at 0 form one batch: it1 prefills
    both (1U); the batch decodes until its longest output (4) is done: it2..it4 (4U). C (arrived
    1.5U) waits for the empty engine: it5 prefills C (5U). Makespan 5U, C's queueing 4U - 1.5U."""
    m = _run("static")
    assert m["iterations"] == 5
    assert m["makespan_s"] == pytest.approx(5 * U, rel=REL)
    assert m["ttft_p99_s"] == pytest.approx(_pct([1 * U, 1 * U, 3.5 * U], 0.99), rel=REL)
    assert m["queue_delay_mean_s"] == pytest.approx(2.5 / 3 * U, rel=REL)
    assert m["e2e_p50_s"] == pytest.approx(_pct([4 * U, 2 * U, 3.5 * U], 0.5), rel=2e-2)
    assert m["throughput_requests_per_s"] == pytest.approx(3 / (5 * U), rel=REL)


def test_busy_fraction_and_in_system_with_an_idle_gap():
    """One request (100 prompt, 2 outputs) at 0 and one at 10U: each runs 2 iterations (prefill,
    decode). Busy 4U of a 12U makespan; in system at every iteration: 1 request."""
    m = _run("vllm", trace=[(0.0, 100, 2), (10 * U, 100, 2)])
    assert m["iterations"] == 4
    assert m["makespan_s"] == pytest.approx(12 * U, rel=REL)
    assert m["busy_fraction"] == pytest.approx(4 / 12, rel=REL)
    assert m["mean_in_system"] == pytest.approx(1.0, rel=REL)
    assert m["tpot_p50_s"] == pytest.approx(1 * U, rel=REL)


def test_kv_block_bytes_and_count_llama3_8b_h100(run_cli):
    """Llama-3-8B (32 layers, 8 KV heads of 128, bf16): K and V per token = 2 x 32 x 8 x 128 x 2 B
    = 128 KiB; a 16-token block is 2 MiB (docs/serving.md). Blocks = floor(usable / block)."""
    m = run_cli.json("serve", "llama3-8b", "--gpu", "H100-SXM", "--rate", "1", "--requests", "2",
                     "--prompt-len", "100", "--output-len", "2")
    assert m["kv_block_bytes"] == 2 * 32 * 8 * 128 * 2 * 16 == 2 * 2**20
    free = m["usable_bytes"] - m["weights_bytes"] - m["activations_bytes"]
    assert m["kv_blocks"] == math.floor(free / m["kv_block_bytes"])
    assert m["kv_blocks"] == 28_392  # docs/serving.md, "KV capacity" (workspace of 1024 sequences' logits)
    assert m["weights_bytes"] == pytest.approx(8.03e9 * 2, rel=0.01)  # 8.03B parameters in bf16
    # the first request alone: its 100-token prompt holds ceil(100/16) = 7 blocks
    assert m["kv_utilization_max"] == pytest.approx(7 / 28_392, rel=1e-9)


def test_kv_utilization_by_ceil_division():
    """--kv-blocks 100: a 100-token prompt holds ceil(100/16) = 7 blocks at its prefill and
    ceil(101/16) = 7 after its one decode; orca reserves prompt + output = ceil(102/16) = 7."""
    for sched in ("vllm", "orca"):
        m = _run(sched, trace=[(0.0, 100, 2)], kv_blocks=100)
        assert m["kv_utilization_max"] == pytest.approx(7 / 100), sched
    m = _run("vllm", trace=[(0.0, 100, 20)], kv_blocks=100)
    # the prompt and 19 generated tokens: at most ceil(119/16) = 8 blocks, and at least 7
    assert m["kv_utilization_max"] == pytest.approx(8 / 100)


# ---------------------------------------------------------------- scaling (Hoffmann et al. 2022)

# eq. (10) of Hoffmann et al. 2022 (arXiv:2203.15556): L = E + A/N^alpha + B/D^beta
E3, A3, B3, AL3, BE3 = 1.69, 406.4, 410.7, 0.34, 0.28
# Besiroglu et al. 2024 (arXiv:2404.10102) refit
EE, AE, BE_, ALE, BEE = 1.8172, 482.01, 2085.43, 0.3478, 0.3658
# Hoffmann et al. Table 3 (approach 1 projections): (params, FLOPs, tokens)
TABLE3 = [(400e6, 1.92e19, 8.0e9), (1e9, 1.21e20, 20.2e9), (10e9, 1.23e22, 205.1e9),
          (175e9, 3.85e24, 3.7e12), (1e12, 1.27e26, 21.2e12), (10e12, 1.30e28, 216.2e12)]


def _eq4(c, e, a, b, alpha, beta):
    g = (alpha * a / (beta * b)) ** (1 / (alpha + beta))
    n = g * (c / 6) ** (beta / (alpha + beta))
    d = (c / 6) ** (alpha / (alpha + beta)) / g
    return n, d, e + a / n**alpha + b / d**beta


@pytest.mark.parametrize("c", [1e21, 5.76e23, 1e26])
def test_approach3_optimum_is_eq4_by_hand(run_cli, c):
    out = run_cli.json("scaling", "optimal", "--law", "approach3", "--compute", f"{c:g}")
    n, d, loss = _eq4(c, E3, A3, B3, AL3, BE3)
    assert out["params"] == pytest.approx(n, rel=1e-9)
    assert out["tokens"] == pytest.approx(d, rel=1e-9)
    assert out["loss"] == pytest.approx(loss, rel=1e-9)
    assert out["params"] * out["tokens"] * 6 == pytest.approx(c, rel=1e-9)
    assert out["tokens_per_param"] == pytest.approx(d / n, rel=1e-9)
    assert out["exponent_a"] == pytest.approx(0.28 / 0.62, rel=1e-12)
    assert out["exponent_b"] == pytest.approx(0.34 / 0.62, rel=1e-12)
    assert out["coefficient_k"] * c ** out["exponent_a"] == pytest.approx(n, rel=1e-9)
    br = out["loss_breakdown"]
    assert br["irreducible"] == 1.69
    assert br["params_term"] == pytest.approx(A3 / n**AL3, rel=1e-9)
    assert br["data_term"] == pytest.approx(B3 / d**BE3, rel=1e-9)


def test_approach3_gopher_budget_documented_figure(run_cli):
    """docs/scaling.md: eq. (4) with the printed coefficients gives 32.2B parameters and 2.98T
    tokens (93 tokens per parameter) at the Gopher budget 5.76e23."""
    out = run_cli.json("scaling", "optimal", "--law", "approach3", "--compute", "5.76e23")
    assert out["params"] == pytest.approx(32.2e9, rel=2e-3)
    assert out["tokens"] == pytest.approx(2.98e12, rel=2e-3)
    assert round(out["tokens_per_param"]) == 93


def test_epoch_optimum_by_hand(run_cli):
    out = run_cli.json("scaling", "optimal", "--law", "epoch", "--compute", "5.76e23")
    n, d, loss = _eq4(5.76e23, EE, AE, BE_, ALE, BEE)
    assert out["params"] == pytest.approx(n, rel=1e-6)
    assert out["tokens"] == pytest.approx(d, rel=1e-6)
    assert out["exponent_a"] == pytest.approx(BEE / (ALE + BEE), rel=1e-6)
    assert out["exponent_a"] == pytest.approx(0.5126, abs=1e-4)  # docs/scaling.md
    assert out["tokens_per_param"] == pytest.approx(18.4, abs=0.05)  # docs/scaling.md


@pytest.mark.parametrize("c", [1e20, 5.76e23])
def test_tpp20_by_hand(run_cli, c):
    out = run_cli.json("scaling", "optimal", "--law", "tpp20", "--compute", f"{c:g}")
    assert out["params"] == pytest.approx(math.sqrt(c / 120), rel=1e-9)
    assert out["tokens"] == pytest.approx(20 * math.sqrt(c / 120), rel=1e-9)
    # the loss of a non-parametric law is approach 3's at its N and D
    n = math.sqrt(c / 120)
    assert out["loss"] == pytest.approx(E3 + A3 / n**AL3 + B3 / (20 * n)**BE3, rel=1e-9)


@pytest.mark.parametrize("n, c, d", TABLE3)
def test_approach1_reproduces_table3(run_cli, n, c, d):
    """docs/scaling.md: approach 1 reproduces Table 3's N within 2.2% and D within 2.3%."""
    out = run_cli.json("scaling", "optimal", "--law", "approach1", "--compute", f"{c:g}")
    assert out["params"] == pytest.approx(n, rel=0.022)
    assert out["tokens"] == pytest.approx(d, rel=0.023)
    assert out["exponent_a"] == 0.5  # Table 2


def test_loss_of_chinchilla_itself(run_cli):
    """Chinchilla (70B, 1.4T tokens) under eq. (10), and the excess over eq. (4)'s optimum at 6ND."""
    out = run_cli.json("scaling", "loss", "--params", "70e9", "--tokens", "1.4e12")
    loss = E3 + A3 / 70e9**AL3 + B3 / 1.4e12**BE3
    assert out["loss"] == pytest.approx(loss, rel=1e-9)
    assert out["compute_flops"] == pytest.approx(6 * 70e9 * 1.4e12, rel=1e-12)
    assert out["tokens_per_param"] == pytest.approx(20.0, rel=1e-12)
    n, d, opt = _eq4(6 * 70e9 * 1.4e12, E3, A3, B3, AL3, BE3)
    assert out["optimal_params"] == pytest.approx(n, rel=1e-9)
    assert out["optimal_tokens"] == pytest.approx(d, rel=1e-9)
    assert out["excess_loss"] == pytest.approx(loss - opt, rel=1e-6)


def test_budget_arithmetic_by_hand(run_cli):
    """GPU-hours = C / (peak x MFU) / 3600; wall = C / (peak x MFU x GPUs); cost = GPU-hours x price."""
    out = run_cli.json("scaling", "budget", "--compute", "5.76e23", "--peak-tflops", "989", "--mfu", "0.5",
                       "--gpus", "1024", "--price-per-gpu-hour", "2.5")
    gpu_h = 5.76e23 / (989e12 * 0.5) / 3600
    assert out["gpu_hours"] == pytest.approx(gpu_h, rel=1e-9)
    assert out["wall_s"] == pytest.approx(5.76e23 / (989e12 * 0.5 * 1024), rel=1e-9)
    assert out["wall_days"] == pytest.approx(gpu_h / 1024 / 24, rel=1e-9)
    assert out["cost"] == pytest.approx(gpu_h * 2.5, rel=1e-9)
    assert out["sustained_flops_per_s"] == pytest.approx(989e12 * 0.5 * 1024, rel=1e-9)
    # the inverse: the same GPU-hours give the same compute back
    back = run_cli.json("scaling", "budget", "--gpu-hours", f"{gpu_h!r}", "--peak-tflops", "989", "--mfu", "0.5")
    assert back["compute_flops"] == pytest.approx(5.76e23, rel=1e-9)


def test_fit_recovers_known_coefficients(run_cli, tmp_path):
    """Noiseless losses from E=1.8, A=450, B=1800, alpha=0.34, beta=0.37 on a 5 x 7 IsoFLOP design:
    the fit recovers them (docs/scaling.md: to 0.1%), and its optimum is eq. (4) of them."""
    e, a, b, al, be = 1.8, 450.0, 1800.0, 0.34, 0.37
    rows = ["params,tokens,loss"]
    for c in (1e18, 1e19, 1e20, 1e21, 1e22):
        n_mid = math.sqrt(c / 120)
        for f in (0.25, 0.4, 0.63, 1.0, 1.6, 2.5, 4.0):
            n = n_mid * f
            d = c / (6 * n)
            rows.append(f"{n!r},{d!r},{e + a / n**al + b / d**be!r}")
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(rows) + "\n")
    out = run_cli.json("scaling", "fit", str(path), "--bootstrap", "0", "--compute", "1e23", "--starts", "40")
    for key, want in (("E", e), ("A", a), ("B", b), ("alpha", al), ("beta", be)):
        assert out[key] == pytest.approx(want, rel=1e-3), key
    assert out["n_runs"] == 35
    n, d, loss = _eq4(1e23, e, a, b, al, be)
    assert out["params"] == pytest.approx(n, rel=1e-2)
    assert out["loss"] == pytest.approx(loss, rel=1e-4)
    assert out["exponent_a"] == pytest.approx(be / (al + be), rel=1e-3)
