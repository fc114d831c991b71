"""What a training step runs beside the layers (calc.roofline.head, roofline_train.clip_ops) and the sustained clocks
it is priced at (calc.roofline.steady, Ceilings.at_clocks): counts by hand, the measured figures they come from."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.calc.roofline.training import clip_ops
from mlsyscalc.calc.roofline.steady import H200_STEADY, STEADY, steady_from_record
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

LLAMA = load_model("llama3-8b")  # hidden 4096, vocab 128256, untied
T, V, H = 2 * 16, 128256, 4096


def _head(opts: RooflineOptions) -> dict[str, object]:
    rows = predict_model(LLAMA, load_ceilings("H100-SXM"), opts).rows
    return {r.pred.name: r.pred for r in rows if r.layers == "head"}


def test_fp32_loss_moves_52_bytes_a_logit_in_eight_kernels():
    """Megatron-LM's vocab-parallel cross-entropy: forward cast (2 + 4), max (4), subtract (4 + 4), exp (4 + 4), sum
    (4), divide (4 + 4) = 38 bytes a logit; backward scale (4 + 4), cast (4 + 2) = 14 (the row results aside)."""
    head = _head(RooflineOptions(phase="train", batch=2, seq=16))
    loss = {k: v for k, v in head.items() if k.startswith("loss.")}
    assert len(loss) == 8
    per_logit = sum(p.bytes for p in loss.values()) - sum(p.write_bytes for k, p in loss.items() if k in ("loss.max", "loss.sum"))
    assert per_logit == pytest.approx(52 * T * V)


def test_fused_loss_reads_the_logits_twice_and_writes_their_gradient_once():
    head = _head(RooflineOptions(phase="train", batch=2, seq=16, loss="fused"))
    loss = [p for k, p in head.items() if k.startswith("loss.")]
    assert [p.name for p in loss] == ["loss.fused_cross_entropy"]
    assert (loss[0].read_bytes, loss[0].write_bytes) == (2 * 2 * T * V, 2 * T * V)


def test_embedding_backward_fills_the_table_and_adds_it_into_the_fp32_main_gradient():
    """Per table element: the bf16 fill (2), then the main-gradient add reads 2 + 4 and writes 4; per token: the
    incoming gradient read and scattered (2 + 2 per element) and 16 + 16 bytes of sort."""
    head = _head(RooflineOptions(phase="train", batch=2, seq=16))
    back = {k: v for k, v in head.items() if k.startswith("embedding.bwd") or k == "embedding.main_grad_add"}
    assert sum(p.bytes for p in back.values()) == pytest.approx(V * H * (2 + 6 + 4) + T * H * 4 + T * 8 + T * 32)


def test_prefill_has_no_loss_and_torch_keeps_its_own():
    assert not any(k.startswith("loss.") for k in _head(RooflineOptions(phase="prefill", batch=2, seq=16)))
    torch_loss = [k for k in _head(RooflineOptions(phase="train", batch=2, seq=16, impl="torch")) if k.startswith("loss.")]
    assert "loss.log_softmax" in torch_loss and "loss.subtract_max" not in torch_loss
    with pytest.raises(MlsysError, match="--loss fused"):
        _head(RooflineOptions(phase="train", batch=2, seq=16, impl="torch", loss="fused"))


def test_dropout_writes_a_mask_byte_an_element_of_each_residual_add():
    plain, drop = (next(r.pred for r in predict_model(LLAMA, load_ceilings("H100-SXM"), RooflineOptions(
        phase="train", batch=2, seq=16, dropout=d)).rows if r.pred.name == "residual_add") for d in (0.0, 0.1))
    assert drop.write_bytes - plain.write_bytes == T * H
    with pytest.raises(MlsysError, match="--dropout applies to --phase train"):
        predict_model(LLAMA, load_ceilings("H100-SXM"), RooflineOptions(phase="prefill", dropout=0.1))


def test_clipping_is_a_norm_pass_and_a_scale_in_the_optimizer_time(run_cli):
    """`mlsys train` adds clip_ops over the AdamW step's parameters (fp32 main gradients: 4 bytes each)."""
    args = ("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", "1024", "--global-batch", "2",
            "--micro-batch", "2")
    with_clip, without = run_cli.json(*args), run_cli.json(*args, "--no-clip-grad")
    params = 6738415616
    ops = clip_ops(params, 4.0, load_ceilings("H100-SXM").at_clocks("sustained"))
    assert [op.read_bytes for op in ops] == [4.0 * params, 4.0 * params] and ops[1].write_bytes == 4.0 * params
    added = with_clip["breakdown"]["optimizer_s"] - without["breakdown"]["optimizer_s"]
    assert added == pytest.approx(sum(op.step_s for op in ops), rel=1e-9)


def test_a_lone_gemm_runs_at_the_measured_steady_share():
    """No mix: a GEMM alone, at the bf16 GEMMs' own steady clock (1,447.5 MHz): bf16 at most 0.658 of the datasheet
    (burst 0.74), fp8 at 0.600 x 1447.5 / 1305 capped by its 0.65, attention x 0.966 x 1447.5 / 1620; the unaligned
    class keeps its ratio to matmul; memory-bound kernels as they were; twice changes nothing."""
    burst = load_ceilings("H100-SXM")
    held = burst.at_clocks("sustained")
    e, b = held.efficiency, burst.efficiency
    assert e.matmul == pytest.approx(0.658) and e.matmul_fp8 == pytest.approx(min(0.65, 0.600 * 1447.5 / 1305))
    assert e.attention == pytest.approx(b.attention * 0.966 * 1447.5 / 1620)
    assert e.matmul_unaligned / e.matmul == pytest.approx(b.matmul_unaligned / b.matmul)
    assert (e.memory, e.memory_broadcast, e.matmul_skinny) == (b.memory, b.memory_broadcast, b.matmul_skinny)
    assert held.at_clocks("sustained") is held and held.clocks == "sustained"
    assert set(STEADY) == {"H200", "H100-SXM"}


def test_a_step_runs_at_the_clock_its_kernel_mix_holds():
    """1 / c = sum share_k / c_k (calc.roofline.steady): 63% GEMMs, 12% attention, 25% memory-bound (the copy's clock at the
    cap 1980 x 700 / 675) give 1,585 MHz, where a GEMM reaches 0.658 x 1585 / 1447.5 = 0.720 of the datasheet;
    a step of memory-bound kernels alone keeps the top clock and the burst efficiencies."""
    mix = {"matmul": 0.63, "attention": 0.12, "memory": 0.25}
    clock = 1 / (0.63 / 1447.5 + 0.12 / 1620 + 0.25 / (1980 * 700 / 675))
    assert H200_STEADY.clock_MHz(mix) == pytest.approx(clock) and clock == pytest.approx(1585, abs=1)
    held = load_ceilings("H200").at_clocks("sustained", mix)
    assert held.efficiency.matmul == pytest.approx(0.658 * clock / 1447.5)
    assert H200_STEADY.clock_MHz({"memory": 1.0}) == 1980
    memory_only = load_ceilings("H200").at_clocks("sustained", {"memory": 1.0})
    assert memory_only.efficiency.matmul == load_ceilings("H200").efficiency.matmul


def test_the_clock_model_on_a_measured_training_step():
    """Held out of the model: the H200 step of reports/train/runs/h200-step-ops (llama3-8b, 8 layers, B1 S8192,
    plain torch) ran at 1,590 MHz median with the power cap binding; its roofline's mix gives a clock within 3%."""
    import json
    from dataclasses import replace
    from pathlib import Path

    rows = [json.loads(x) for x in (Path(__file__).resolve().parents[1] / "reports/train/runs/h200-step-ops/rows.jsonl")
            .read_text().splitlines()]
    step = next(r for r in rows if r["op"] == "train_step_steady")
    assert "sw_power_cap" in step["card_steady"]["throttle"]
    from mlsyscalc.calc.roofline.model import kernel_mix

    spec = replace(LLAMA, num_layers=8)
    burst = predict_model(spec, load_ceilings("H200"), RooflineOptions(phase="train", seq=8192, impl="torch",
                                                                        master_weights=False, clocks="burst"))
    assert H200_STEADY.clock_MHz(kernel_mix(burst.rows)) == pytest.approx(step["card_steady"]["sm_clock_MHz"], rel=0.03)


def test_cards_without_a_measurement_keep_their_burst_efficiencies():
    a100 = load_ceilings("A100-80GB-SXM")
    held = a100.at_clocks("sustained")
    assert held.efficiency == a100.efficiency and "no steady-state measurement" in held.notes[-1]


def test_a_calibration_file_brings_its_own_steady_state():
    """steady_from_record reads `mlsys bench ceilings --sustained`'s record: GEMM caps over the datasheet, attention's
    steady / burst, the copy over the datasheet bandwidth (the fewest of each kind); each kind's mean steady clock,
    the copy's scaled to where its power meets the limit."""
    def w(kind, burst, rate, mhz, watts=700.0):
        return {"kind": kind, "burst_rate": burst, "sustained_rate": rate,
                "card_steady": {"sm_clock_MHz": mhz, "power_W": watts}}
    record = {"card": {"max_sm_clock_MHz": 1980, "power_limit_W": 700}, "workloads": [
        w("matmul", 700e12, 600e12, 1400), w("matmul", 650e12, 620e12, 1500), w("matmul_fp8", 1300e12, 1100e12, 1300),
        w("attention", 500e12, 450e12, 1600), w("memory", 4.2e12, 4.0e12, 1980, 660.0), {"kind": "matmul", "error": "OOM"}]}
    h200 = load_ceilings("H200")
    got = steady_from_record(record, h200.gpu.peak_flops_by_dtype, h200.gpu.memory_bandwidth_Bps, "f")
    assert got.matmul == pytest.approx(600e12 / 989.5e12) and got.matmul_fp8 == pytest.approx(1100e12 / 1979e12)
    assert got.attention == pytest.approx(0.9) and got.memory == pytest.approx(4.0e12 / 4.8e12)
    assert (got.matmul_MHz, got.attention_MHz, got.memory_MHz) == (1450, 1600, pytest.approx(1980 * 700 / 660))
    with pytest.raises(MlsysError, match="sustained must be the object"):
        steady_from_record([1], h200.gpu.peak_flops_by_dtype, 1.0, "f")
    with pytest.raises(MlsysError, match="positive numbers"):
        steady_from_record({"card": record["card"], "workloads": [w("matmul", "x", 1, 1400)]}, {"bf16": 1.0}, 1.0, "f")
    assert H200_STEADY.matmul == 0.658


def test_train_prices_sustained_by_default_and_burst_on_request(run_cli):
    args = ("train", "llama2-7b", "--gpus", "1", "--gpu", "H100-SXM", "--seq", "1024", "--global-batch", "2",
            "--micro-batch", "2")
    sustained, burst = run_cli.json(*args), run_cli.json(*args, "--clocks", "burst")
    assert sustained["step_time_s"] > 1.03 * burst["step_time_s"]
    roof = run_cli.json("roofline", "llama2-7b", "--phase", "train", "--batch", "2", "--seq", "1024", "--gpu",
                        "H100-SXM", "--clocks", "burst")
    assert burst["breakdown"]["compute_s"] < roof["totals"]["predicted_s"] < sustained["step_time_s"]
