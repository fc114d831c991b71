"""Inputs a demanding user tried that must exit 2 (one clear line, no traceback) instead of giving
a number: malformed calibration values, fractional sweep batches, positions a model cannot
embed, tensor parallelism wider than any node of the GPU, training 4-bit weights."""

from __future__ import annotations

import json

import pytest

from mlsyscalc import MlsysError
from mlsyscalc.calc.roofline.calibration import load_ceilings


def _cal(tmp_path, **changes):
    record = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "peak_flops": {"bf16": 700e12},
              "bandwidth_Bps": {"read": 3.1e12, "write": 2.9e12}}
    record.update(changes)
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(record).replace('"INF"', "Infinity"))
    return path


@pytest.mark.parametrize("changes,match", [
    ({"sm_count": -5}, "sm_count"),  # was accepted: negative waves, compute time < 0
    ({"sm_count": 0}, "sm_count"),  # was silently replaced by the datasheet's
    ({"sm_count": "x"}, "sm_count"),  # was exit 1 (ValueError)
    ({"sm_count": 13.5}, "sm_count"),  # was truncated to 13
    ({"peak_flops": {"bf16": "INF"}}, "finite"),  # was accepted: every matmul took 0 s
    ({"bandwidth_Bps": {"read": True, "write": 2.9e12}}, "number"),  # was 1 B/s
])
def test_malformed_calibration_values_are_errors(tmp_path, changes, match):
    with pytest.raises(MlsysError, match=match):
        load_ceilings(None, _cal(tmp_path, **changes))


def test_malformed_calibration_exits_2_through_the_cli(run_cli, tmp_path):
    code, _, err = run_cli("roofline", "gpt2", "--calibration", str(_cal(tmp_path, sm_count="x")))
    assert code == 2 and "sm_count" in err and "Traceback" not in err


def test_fractional_sweep_batch_is_an_error(run_cli):
    code, _, err = run_cli("roofline", "gpt2", "--sweep", "batch=1,1.5")  # was silently batch 1
    assert code == 2 and "whole number" in err


@pytest.mark.parametrize("args", [
    ["--phase", "decode", "--context", "1024"],  # 1025 positions > gpt2's 1024 learned ones
    ["--phase", "prefill", "--seq", "5000"],
    ["--phase", "train", "--seq", "2048"],
])
def test_learned_positions_bound_the_sequence(run_cli, args):
    code, _, err = run_cli("roofline", "gpt2", *args)
    assert code == 2 and "1024" in err and "position" in err
    assert run_cli("roofline", "gpt2", "--phase", "decode", "--context", "1023")[0] == 0


def test_tp_beyond_every_node_of_the_gpu_is_an_error(run_cli):
    # H100-SXM nodes (hgx-h100) hold 8 GPUs: --tp 16 used to fall back to an NVLink ring estimate
    code, _, err = run_cli("roofline", "llama3.1-405b", "--tp", "16", "--phase", "decode", "--context", "10",
                           "--dtype", "fp8")
    assert code == 2 and "8 GPUs" in err


@pytest.mark.parametrize("dtype", ["int4", "nf4"])
def test_training_4bit_weights_is_an_error(run_cli, dtype):
    code, _, err = run_cli("roofline", "gpt2", "--phase", "train", "--seq", "512", "--dtype", dtype)
    assert code == 2 and "weight-only" in err


# --- sliding-window attention in prefill/train: window_fraction by hand ---------------------------

from mlsyscalc import count_params, load_model  # noqa: E402
from mlsyscalc.calc.comm.step import StepOptions, step_comm  # noqa: E402
from mlsyscalc.calc.counts.flops import attention_layer_flops  # noqa: E402
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model  # noqa: E402
from mlsyscalc.calc.roofline.ops import predict_attention, window_fraction  # noqa: E402

H100 = load_ceilings("H100-SXM")


def test_window_fraction_by_hand():
    # Sq = Skv = 8192, W = 4096: (W^2/2 + W (S - W)) / S^2 = (8.39e6 + 16.78e6) / 67.1e6 = 0.375
    assert window_fraction(8192, 8192, 4096) == pytest.approx(0.375)
    assert window_fraction(4096, 4096, 4096) == pytest.approx(0.5)  # W >= S: plain causal, 1/2
    assert window_fraction(1, 10_000, 4096) == pytest.approx(4096 / 10_000)  # one query sees W keys
    op = predict_attention(1, 16, 8, 8192, 8192, 256, True, window=4096)
    assert op.flops == pytest.approx(2 * 8192 * 8192 * 16 * 512 * 0.375)
    assert op.read_bytes == pytest.approx(8192 * 16 * 256 * 2 + 8192 * 8 * 512 * 2)  # every key is needed once
    with pytest.raises(MlsysError, match="causal"):
        predict_attention(1, 16, 8, 8192, 8192, 256, False, window=4096)


def _rows(result, name):
    return [r for r in result.rows if r.pred.name == name]


def test_gemma2_prefill_skips_tiles_outside_the_window_and_full_is_selectable():
    spec = load_model("gemma2-9b")  # 42 layers, 21 with a 4096 window, 16 heads of 256
    skip = predict_model(spec, H100, RooflineOptions(seq=8192))
    full = predict_model(spec, H100, RooflineOptions(seq=8192, window="full"))
    (win,), (glob,) = _rows(skip, "attention (window)"), _rows(skip, "attention")
    assert win.count == glob.count == 21
    assert win.pred.flops == pytest.approx(glob.pred.flops * 0.375 / 0.5)  # 3/4 of the causal work
    assert _rows(full, "attention (window)")[0].pred.flops == glob.pred.flops
    assert skip.time_s < full.time_s
    # model FLOPs: the full causal count less 21 x (full - windowed) core per layer
    per_layer = attention_layer_flops(spec, "full_attention", 1, 8192, 8192, True)
    assert full.model_flops - skip.model_flops == pytest.approx(21 * per_layer * (1 - 0.375 / 0.5))
    assert any("skip KV tiles" in n for n in skip.notes) and any("window full" in n for n in full.notes)


def test_mistral_window_equal_to_the_sequence_changes_nothing():
    spec = load_model("mistral-7b")  # every layer has a 4096 window
    a = predict_model(spec, H100, RooflineOptions(seq=4096))
    b = predict_model(spec, H100, RooflineOptions(seq=4096, window="full"))
    assert a.time_s == pytest.approx(b.time_s) and a.model_flops == pytest.approx(b.model_flops)
    train = predict_model(spec, H100, RooflineOptions(phase="train", seq=8192))
    (bwd,) = _rows(train, "attention (window).bwd")
    assert bwd.pred.flops == pytest.approx(2.5 * 2 * 8192 * 8192 * 32 * 256 * window_fraction(8192, 8192, 4096))


# --- training: recomputation and data-parallel communication --------------------------------------

def test_recompute_adds_the_forward_layers_or_the_attention_core():
    spec = load_model("llama3-8b")
    base = RooflineOptions(phase="train", seq=4096, tp=2)
    none = predict_model(spec, H100, base)
    full = predict_model(spec, H100, RooflineOptions(**{**base.__dict__, "recompute": "full"}))
    sel = predict_model(spec, H100, RooflineOptions(**{**base.__dict__, "recompute": "selective"}))
    head_s = sum(r.total_s for r in none.rows if r.layers == "head" and r.pass_name == "forward")
    assert none.pass_s("recompute") == 0
    assert full.pass_s("recompute") == pytest.approx(none.pass_s("forward") - head_s)
    attention_s = sum(r.total_s for r in none.rows if r.pass_name == "forward" and r.pred.kind == "attention")
    assert sel.pass_s("recompute") == pytest.approx(attention_s)
    # full recompute repeats the 2 x 32 forward TP all-reduces
    (again,) = [c for c in full.comm if c.pass_name == "recompute"]
    assert again.count == 64
    assert full.time_s == pytest.approx(none.time_s + full.pass_s("recompute") + again.total_s)
    assert sel.time_s == pytest.approx(none.time_s + attention_s)
    assert full.model_flops == none.model_flops  # MFU counts the model's work, not the recomputation


def test_data_parallel_gradient_traffic_comes_from_comm_step():
    spec = load_model("llama3-8b")
    opts = RooflineOptions(phase="train", seq=4096, tp=2, dp=4)
    r = predict_model(spec, H100, opts)
    single = predict_model(spec, H100, RooflineOptions(phase="train", seq=4096, tp=2))
    (ar,) = [c for c in r.comm if c.method.startswith("comm_step")]
    # ZeRO-0: one all-reduce of this GPU's bf16 gradients: params / tp x 2 bytes
    assert ar.collective == "all-reduce" and ar.count == 1
    assert ar.size_bytes == pytest.approx(count_params(spec).total / 2 * 2, rel=1e-6)
    step = step_comm(spec, StepOptions(dp=4, tp=2, batch=1, seq=4096), "hgx-h100")
    assert ar.total_s == pytest.approx(step.by_dim["dp"]["time_s"])
    assert r.time_s == pytest.approx(single.time_s + ar.total_s)  # not overlapped: simply added
    assert r.tokens_per_s == pytest.approx(4 * 4096 / r.time_s)


def test_dp_overlap_hides_gradients_behind_backward_and_zero_shards_adamw():
    spec = load_model("llama3-8b")
    kw = dict(phase="train", seq=4096, tp=2, dp=4, zero=1)
    plain = predict_model(spec, H100, RooflineOptions(**kw))
    over = predict_model(spec, H100, RooflineOptions(**kw, dp_overlap=True))
    grads = [c for c in over.comm if c.collective == "reduce-scatter"]
    gathers = [c for c in over.comm if c.collective == "all-gather"]
    hidden = min(sum(c.total_s for c in grads), over.pass_s("backward"))
    assert sum(c.hidden_s for c in grads) == pytest.approx(hidden)
    assert sum(c.hidden_s for c in gathers) == pytest.approx(min(sum(c.total_s for c in gathers),
                                                                 over.pass_s("forward")))
    assert over.time_s == pytest.approx(plain.time_s - over.comm_hidden_s)
    zero0 = predict_model(spec, H100, RooflineOptions(phase="train", seq=4096, tp=2, dp=4))
    (adam0,), (adam1,) = _rows(zero0, "adamw"), _rows(plain, "adamw")
    assert adam0.pred.flops == pytest.approx(4 * adam1.pred.flops, rel=1e-6)  # 1/dp of the parameters


@pytest.mark.parametrize("args", [
    ["--phase", "prefill", "--dp", "2"],
    ["--phase", "decode", "--context", "8", "--recompute", "full"],
    ["--phase", "train", "--zero", "1"],  # ZeRO without data parallelism
    ["--phase", "train", "--dp", "5", "--tp", "2"],  # 10 GPUs do not fill 8-GPU nodes
])
def test_training_only_options_exit_2_elsewhere(run_cli, args):
    code, _, err = run_cli("roofline", "llama3-8b", "--seq", "512", *args)
    assert code == 2 and err.strip() and "Traceback" not in err
