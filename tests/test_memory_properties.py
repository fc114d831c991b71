"""Hypothesis properties of the memory calculators: parts add up; more tokens never less
memory; more sharding never more per-GPU memory."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mlsyscalc import load_model
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.calc.memory.training import TrainOptions, train_memory

MODELS = {name: load_model(name) for name in ("llama2-7b", "llama3-8b", "mixtral-8x7b", "gpt2", "gemma2-9b")}
train_opts = st.builds(
    TrainOptions,
    batch=st.integers(1, 16), seq=st.sampled_from([128, 512, 2048, 4096]), grad_accum=st.integers(1, 8),
    optimizer=st.sampled_from(["adamw", "sgd-momentum", "adafactor", "adam8bit"]),
    dp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]),
    sp=st.booleans(), zero=st.integers(0, 3), recompute=st.sampled_from(["none", "selective", "full"]),
    flash=st.booleans(), dropout=st.booleans(), schedule=st.sampled_from(["1f1b", "gpipe"]),
    framework=st.sampled_from(["megatron", "torch"]),
)
model = st.sampled_from(sorted(MODELS))


@settings(max_examples=60, deadline=None)
@given(model, train_opts)
def test_train_parts_sum_to_totals(name, opts):
    r = train_memory(MODELS[name], opts)
    for stage in r.stages:
        assert sum(stage.breakdown.values()) == stage.total
        assert all(v >= 0 for v in stage.breakdown.values())
    assert r.total == max(s.total for s in r.stages)


@settings(max_examples=40, deadline=None)
@given(model, train_opts, st.integers(1, 4))
def test_more_batch_or_seq_never_less(name, opts, factor):
    base = train_memory(MODELS[name], opts).total
    assert train_memory(MODELS[name], replace(opts, batch=opts.batch * factor)).total >= base
    assert train_memory(MODELS[name], replace(opts, seq=opts.seq * factor)).total >= base


@settings(max_examples=40, deadline=None)
@given(model, train_opts)
def test_higher_zero_stage_never_more_per_gpu(name, opts):
    # torch has no ZeRO-1 and runs ZeRO-2 as FSDP2, whose fp32 gradient shards outweigh what one replica saves:
    # at dp 1 it holds 18 bytes a parameter (bf16 gathered, fp32 shard, fp32 gradient, two fp32 moments) against
    # DDP's 16 (bf16 weight and gradient, fp32 master and moments)
    torch = opts.framework == "torch"
    assume(not torch or opts.dp > 1)
    totals = [train_memory(MODELS[name], replace(opts, zero=z)).total for z in ((0, 2) if torch else range(3))]
    assert totals == sorted(totals, reverse=True)
    # ZeRO-3 adds the gathered layers, but never exceeds ZeRO-2 once dp shards them
    if opts.dp >= 4:
        assert train_memory(MODELS[name], replace(opts, zero=3)).total <= totals[-1]


@settings(max_examples=40, deadline=None)
@given(model, train_opts)
def test_more_dp_with_zero_never_more(name, opts):
    opts = replace(opts, zero=max(1, opts.zero))
    a = train_memory(MODELS[name], replace(opts, dp=2)).total
    b = train_memory(MODELS[name], replace(opts, dp=8)).total
    assert b <= a


infer_opts = st.builds(
    InferOptions, batch=st.integers(1, 64), context=st.integers(1, 65536),
    dtype=st.sampled_from(["fp32", "bf16", "fp8", "int8", "int4", "nf4"]), kv_dtype=st.sampled_from(["bf16", "fp8"]),
    tp=st.sampled_from([1, 2, 4, 8]), block_size=st.sampled_from([0, 16, 256]), flash=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(model, infer_opts, st.integers(1, 1000))
def test_infer_parts_add_and_more_tokens_never_less_kv(name, opts, extra):
    assume(MODELS[name].num_heads % opts.tp == 0)
    r = infer_memory(MODELS[name], opts)
    assert sum(r.breakdown.values()) == r.total
    longer = infer_memory(MODELS[name], replace(opts, context=opts.context + extra))
    assert longer.breakdown["kv_cache"] >= r.breakdown["kv_cache"] and longer.total >= r.total
    bigger = infer_memory(MODELS[name], replace(opts, batch=opts.batch + 1))
    assert bigger.breakdown["kv_cache"] >= r.breakdown["kv_cache"]


@settings(max_examples=40, deadline=None)
@given(model, infer_opts)
def test_tp_sharding_never_increases_per_gpu(name, opts):
    assume(MODELS[name].num_heads % opts.tp == 0)
    one = infer_memory(MODELS[name], replace(opts, tp=1))
    sharded = infer_memory(MODELS[name], opts)
    assert sharded.breakdown["weights"] <= one.breakdown["weights"]
    assert sharded.breakdown["kv_cache"] <= one.breakdown["kv_cache"]
