"""`mlsys train --attention unfused`: Megatron-LM's S x S attention core, by hand arithmetic; `--attention flash2`:
the flash kernels at FlashAttention-2's efficiency on Hopper, and nowhere else."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.ops import predict_attention, predict_matmul, predict_memory_op
from mlsyscalc.calc.train.step import train_parts, train_step
from mlsyscalc.calc.train.attention_time import (TRITON_PASS_SLOWDOWN, attention_ceilings, unfused_attention_ops,
                                                 unfused_attention_s)
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

SMALL = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
         "intermediate_size": 2816}


def test_kernels_flops_and_bytes_by_hand():
    """8 heads over tp 2, micro-batch 3: B = 12 products of S = 512; E = 12 x 512^2 score elements of 2 bytes.
    FLOPs: Q K^T and P V forward, 4 products backward, 2 B S^2 d each (d = 1024 / 8 = 128). Bytes: softmax
    2E + 2E, dropout 2E + 3E (1-byte mask), their backward 3E + 2E and 4E + 2E."""
    spec = load_model("llama2-7b", SMALL)
    ceil = load_ceilings("H100-SXM")
    ops = unfused_attention_ops(spec, ceil, tp=2, micro_batch=3, seq=512)
    products, elems = 12, 12 * 512 * 512
    one = 2 * products * 512 * 512 * 128
    assert sum(o.flops for o in ops["forward"] if o.kind == "matmul") == 2 * one
    assert sum(o.flops for o in ops["backward"] if o.kind == "matmul") == 4 * one
    mem = {o.name: (o.read_bytes, o.write_bytes) for p in ops.values() for o in p if o.kind == "memory"}
    assert mem == {"scale + mask + softmax": (2 * elems, 2 * elems), "attention dropout": (2 * elems, 3 * elems),
                   "attention dropout backward": (3 * elems, 2 * elems), "softmax backward": (4 * elems, 2 * elems)}
    # each kernel is the roofline's own: the same call gives the same seconds
    assert ops["forward"][0].predicted_s == predict_matmul(512, 512, 128, "bf16", ceil, batch=12).predicted_s
    assert ops["forward"][1].predicted_s == predict_memory_op("x", 2 * elems, 2 * elems, 0.0, "bf16", ceil).predicted_s
    secs = unfused_attention_s(spec, ceil, tp=2, micro_batch=3, seq=512)
    # a layer's share of the step: each kernel plus the stream's gap before it
    assert secs["forward"] == pytest.approx(sum(o.predicted_s + ceil.gap_s for o in ops["forward"]))


@pytest.mark.parametrize("recompute, forwards", [("none", 1), ("selective", 2), ("full", 2)])
def test_step_swaps_the_flash_core_for_the_unfused_one(recompute, forwards):
    """One GPU, m micro-batches: the step grows by m x layers x (unfused - flash) attention core, the forward
    counted twice when the recomputation repeats it. The flash core is the roofline's attention rows."""
    from mlsyscalc.calc.train.parts import roofline_pass, stage_parts

    spec = load_model("llama2-7b", SMALL)
    ceil = load_ceilings("H100-SXM")
    opts = TrainStepOptions(gpus=1, seq=1024, global_batch=4, micro_batch=2, recompute=recompute)
    flash = train_step(spec, ceil, "hgx-h100", opts)
    unfused = train_step(spec, ceil, "hgx-h100", TrainStepOptions(**{**opts.__dict__, "attention": "unfused"}))
    core = stage_parts(spec, roofline_pass(spec, ceil, tp=1, cp=1, micro_batch=2, seq=1024, dtype="bf16"),
                       sp=False).attention_s["dense"]
    new = unfused_attention_s(spec, ceil, tp=1, micro_batch=2, seq=1024)
    per_mb = forwards * (new["forward"] - core["forward"]) + new["backward"] - core["backward"]
    assert unfused.step_time_s - flash.step_time_s == pytest.approx(2 * 4 * per_mb, rel=1e-9)
    assert unfused.step_time_s > flash.step_time_s


def test_unfused_attention_has_no_context_parallelism():
    spec = load_model("llama2-7b", SMALL)
    with pytest.raises(MlsysError, match="context parallelism"):
        train_step(spec, load_ceilings("H100-SXM"), "hgx-h100",
                   TrainStepOptions(gpus=2, cp=2, seq=1024, global_batch=1, attention="unfused"))


def test_cli_flag_reaches_train_and_plan(run_cli):
    args = ("llama2-7b", "--gpu", "H100-SXM", "--seq", "2048", "--global-batch", "8")
    flash = run_cli.json("train", *args, "--gpus", "8", "--tp", "8")
    unfused = run_cli.json("train", *args, "--gpus", "8", "--tp", "8", "--attention", "unfused")
    assert unfused["breakdown"]["compute_s"] > flash["breakdown"]["compute_s"]
    best = run_cli.json("plan", *args, "--gpus", "8", "--top", "1", "--attention", "unfused", "--fix", "tp=8",
                        "--fix", "pp=1", "--fix", "micro_batch=1", "--fix", "zero=0", "--fix", "recompute=none")
    assert best["candidates"][0]["step_time_s"] == pytest.approx(unfused["step_time_s"], rel=1e-9)
    code, _, err = run_cli("train", *args, "--gpus", "8", "--attention", "sliding")
    assert code == 2 and "Invalid value for '--attention': 'sliding' is not one of 'flash', 'flash2', 'triton', 'unfused'" in err


def test_flash2_prices_attention_kernels_at_their_efficiency_on_hopper_only():
    h100 = load_ceilings("H100-SXM")
    fa2 = attention_ceilings(h100, "flash2")
    e = h100.efficiency
    assert fa2.efficiency.attention == e.attention_flash2 < e.attention
    assert fa2.efficiency.attention_small_head == pytest.approx(e.attention_small_head * e.attention_flash2 / e.attention)
    assert fa2.efficiency.matmul == e.matmul and fa2.efficiency.memory == e.memory  # nothing else moves
    assert attention_ceilings(fa2, "flash2") == fa2  # twice is once
    assert attention_ceilings(h100, "flash") is h100 and attention_ceilings(h100, "unfused") is h100
    a100 = load_ceilings("A100-80GB-SXM")
    assert attention_ceilings(a100, "flash2") is a100  # FlashAttention-2 is Ampere's own kernel
    # a compute-bound causal forward: its time scales by the efficiencies' ratio exactly (same tiling)
    shape = (4, 32, 32, 4096, 4096, 128, True)
    fast, slow = predict_attention(*shape, gpu=h100), predict_attention(*shape, gpu=fa2)
    assert slow.compute_s == pytest.approx(fast.compute_s * e.attention / e.attention_flash2, rel=1e-12)


def test_flash2_in_train_and_plan(run_cli):
    """flash2 adds the attention kernels' extra time to the compute (nothing else moves: memory, traffic); plan
    prices it as train does."""
    args = ("llama3-8b", "--cluster", "hgx-h100", "--seq", "4096", "--global-batch", "16", "--gpus", "8",
            "--framework", "torch")
    layout = ("--dp", "8", "--micro-batch", "1", "--zero", "3", "--recompute", "selective")
    flash = run_cli.json("train", *args, *layout)
    fa2 = run_cli.json("train", *args, *layout, "--attention", "flash2")
    assert fa2["breakdown"]["compute_s"] > flash["breakdown"]["compute_s"]
    assert fa2["memory_bytes_per_gpu"] == flash["memory_bytes_per_gpu"]
    assert {k: v for k, v in fa2["breakdown"].items() if k != "compute_s"} == pytest.approx(
        {k: v for k, v in flash["breakdown"].items() if k != "compute_s"}, rel=1e-9)
    best = run_cli.json("plan", *args, "--top", "1", "--attention", "flash2", "--fix", "tp=1", "--fix", "pp=1",
                        "--fix", "cp=1", "--fix", "micro_batch=1", "--fix", "zero=3", "--fix", "recompute=selective")
    assert best["candidates"][0]["step_time_s"] == pytest.approx(fa2["step_time_s"], rel=1e-9)
    a100 = ("--cluster", "dgx-a100")
    same = [run_cli.json("train", *args[:1], *a100, *args[3:], *layout, "--attention", a)["step_time_s"]
            for a in ("flash", "flash2")]
    assert same[0] == same[1]


def test_triton_attention_is_flash2_times_the_papers_slowdown_per_pass():
    """llm-foundry's Triton flash attention: each pass of the attention core is FlashAttention-2's (flash2) time x
    1.4 forward (a recomputed forward too) and x 2 backward (Dao 2023, section 4.1); nothing else in the layer moves;
    on an A100, where flash2 is the card's flash, the same factors apply to flash."""
    assert TRITON_PASS_SLOWDOWN == {"forward": 1.4, "backward": 2.0}
    spec = load_model("llama3-8b")
    for gpu, base in (("H100-SXM", "flash2"), ("A100-80GB-SXM", "flash")):
        ceil = load_ceilings(gpu)
        parts = {}
        for a in (base, "triton"):
            opts = TrainStepOptions(gpus=8, seq=8192, global_batch=8, micro_batch=1, dp=8, attention=a)
            parts[a] = train_parts(spec, attention_ceilings(ceil, a), opts, "fused")
        fa2, tri = parts[base], parts["triton"]
        for p, x in (("forward", 1.4), ("backward", 2.0), ("recompute_full", 1.4), ("recompute_selective", 1.4)):
            assert tri.attention_s["dense"][p] == pytest.approx(x * fa2.attention_s["dense"][p], rel=1e-12)
            rest = lambda q: q.layer_s["dense"][p] - q.attention_s["dense"][p]  # noqa: E731
            assert rest(tri) == pytest.approx(rest(fa2), rel=1e-12)
        assert fa2.attention_s["dense"]["forward"] > 0


def test_triton_in_train_and_plan(run_cli):
    """train and plan price --attention triton alike; memory and traffic are flash2's."""
    args = ("llama3-8b", "--cluster", "hgx-h100", "--seq", "8192", "--global-batch", "16", "--gpus", "8",
            "--framework", "torch")
    layout = ("--dp", "8", "--micro-batch", "1", "--zero", "3", "--recompute", "full")
    fa2 = run_cli.json("train", *args, *layout, "--attention", "flash2")
    tri = run_cli.json("train", *args, *layout, "--attention", "triton")
    assert tri["breakdown"]["compute_s"] > 1.1 * fa2["breakdown"]["compute_s"]
    assert tri["memory_bytes_per_gpu"] == fa2["memory_bytes_per_gpu"]
    assert any("attention triton" in n for n in tri["notes"])
    best = run_cli.json("plan", *args, "--top", "1", "--attention", "triton", "--fix", "tp=1", "--fix", "pp=1",
                        "--fix", "cp=1", "--fix", "micro_batch=1", "--fix", "zero=3", "--fix", "recompute=full")
    assert best["candidates"][0]["step_time_s"] == pytest.approx(tri["step_time_s"], rel=1e-9)
