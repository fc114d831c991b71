"""The whole-model bench's peak-memory prediction: the terms it adds to calc.memory for plain torch.

Expected values are written out from torch's documented defaults (CUBLAS_WORKSPACE_CONFIG: ":4096:8"
on sm90, ":4096:2:16:8" elsewhere; TORCH_CUBLASLT_WORKSPACE_SIZE 1024 KiB) and from gpt2's and
llama2-7b's config.json shapes, not from the code under test.
"""

from __future__ import annotations

import pytest

from mlsyscalc.bench.cases.model import ModelCase, blas_workspace_bytes, plain_torch_live_hidden, predicted_peak_bytes
from mlsyscalc.calc.memory.inference import InferOptions, infer_memory
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

MiB = 2**20


def test_cublas_workspace_defaults_per_architecture():
    """32 MiB on Hopper (4096 KiB x 8); 2 x 4096 KiB + 8 x 16 KiB elsewhere; +1 MiB cuBLASLt with biases."""
    llama, gpt2 = load_model("llama2-7b"), load_model("gpt2")
    assert blas_workspace_bytes(llama, (9, 0), env={}) == 32 * MiB
    assert blas_workspace_bytes(llama, (8, 0), env={}) == (2 * 4096 + 8 * 16) * 1024
    assert blas_workspace_bytes(gpt2, (9, 0), env={}) == 33 * MiB  # gpt2's linears have biases


def test_cublas_workspace_follows_the_environment():
    """CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8 is 8,320 KiB; a smaller cuBLASLt size replaces 1024 KiB."""
    gpt2 = load_model("gpt2")
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:2:16:8", "TORCH_CUBLASLT_WORKSPACE_SIZE": "256"}
    assert blas_workspace_bytes(gpt2, (9, 0), env=env) == (8320 + 256) * 1024
    assert blas_workspace_bytes(gpt2, (9, 0), env={"CUBLAS_WORKSPACE_CONFIG": ":16:8"}) == (128 + 1024) * 1024


def test_live_hidden_counts_by_block_structure():
    """A sequential block keeps 4 hidden-wide tensors during its MLP; phi-2's one-norm parallel block 3."""
    assert plain_torch_live_hidden(load_model("llama2-7b")) == 4
    assert plain_torch_live_hidden(load_model("phi-2")) == 3


def test_live_hidden_adds_hidden_wide_tensors_to_the_workspace():
    """llama2-7b prefill of 8 x 2048 tokens: each extra live tensor is 16,384 tokens x 4096 x 2 bytes = 128 MiB."""
    llama = load_model("llama2-7b")
    base = InferOptions(batch=8, context=2048, prefill_chunk=8 * 2048)
    two = infer_memory(llama, base).detail["activations_workspace"]
    four = infer_memory(llama, InferOptions(batch=8, context=2048, prefill_chunk=8 * 2048, live_hidden=4))
    assert four.detail["activations_workspace"] - two == 2 * 128 * MiB
    with pytest.raises(MlsysError, match="live-hidden"):
        infer_memory(llama, InferOptions(live_hidden=0))


def test_predicted_peak_of_llama_prefill_written_out():
    """llama2-7b B8 S2048 prefill on sm90: weights 6,738,415,616 params x 2 B; KV 2 x 32 layers x 16,384
    tokens x 4096 x 2 B = 8 GiB; workspace 16,384 x (4 x 4096 + 3 x 11008) x 2 B; logits 8 x 32000 x 4 B
    (activations in bf16, logits in fp32); cuBLAS 32 MiB. Measured on an H100 (torch 2.11): 22,621.6 MiB with one stream's
    workspace (scripts/memory_attribution.py)."""
    weights = 6_738_415_616 * 2
    kv = 2 * 32 * 16_384 * 4096 * 2
    workspace = 16_384 * (4 * 4096 + 3 * 11_008) * 2
    logits = 8 * 32_000 * 4
    want = weights + kv + workspace + logits + 32 * MiB
    got = predicted_peak_bytes(load_model("llama2-7b"), ModelCase("prefill", 8, 2048), (9, 0))
    assert got == pytest.approx(want, rel=1e-9)


def test_triton_decode_cache_is_sized_in_whole_pages():
    """The paged decode kernel's caches hold whole 64-token pages: llama2-7b decode B16 at 2048 cached
    tokens needs 2049 positions, 33 pages = 2112; the 63 extra positions are 2 (K, V) x 32 layers x 16
    sequences x 63 x 4096 x 2 bytes = 528,482,304 bytes over the torch kernels' exact cache."""
    llama = load_model("llama2-7b")
    torch_peak = predicted_peak_bytes(llama, ModelCase("decode", 16, 2048), (9, 0))
    triton_peak = predicted_peak_bytes(llama, ModelCase("decode", 16, 2048, kernels="triton"), (9, 0))
    assert triton_peak - torch_peak == 2 * 32 * 16 * 63 * 4096 * 2


def test_the_tuners_flush_buffer_is_released_before_a_peak():
    """kernels.tuning keeps a 256 MiB L2-flush buffer per GPU after timing (one H200: 256 MiB of the
    263 MiB that int4 llama2-7b decode B1 measured over its prediction); the bench drops it before it
    measures a peak, and tuning allocates it again when next needed."""
    pytest.importorskip("triton")
    from mlsyscalc.bench.cases.model import _release_tuning
    from mlsyscalc.kernels import tuning

    tuning._flush[0] = object()
    _release_tuning()
    assert tuning._flush == {}


def test_tied_embedding_gradients_at_the_backward_end_written_out():
    """falcon-40b cut to 1 layer, train B1 S2048, as the bench runs it (plain torch, persistent gradients, bf16
    AdamW states): the peak is at the backward's end, where autograd holds the tied head's gradient, the
    embedding's and their sum (3 x 65,024 x 8,192 x 2 bytes) beside the model states (8 bytes a parameter:
    layer 75,497,472 fused QKV (128 + 2 x 8 heads of 64) + 67,108,864 dense + 2 x 268,435,456 MLP + 2 norms of
    2 x 8,192; embedding 65,024 x 8,192; final norm 2 x 8,192). Measured on an H200 (torch 2.11, ad1fa05,
    reports/models/h200_falcon40b_memory.jsonl): 12,961,357,312 bytes; the start of backward, which the model
    took before, is 8.7% short of it."""
    from dataclasses import replace

    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    spec = replace(load_model("falcon-40b"), num_layers=1)
    params = 75_497_472 + 67_108_864 + 2 * 268_435_456 + 2 * 2 * 8192 + 65_024 * 8192 + 2 * 8192
    table = 65_024 * 8192 * 2
    mem = train_memory(spec, TrainOptions(batch=1, seq=2048, master_weights=False, grad_accumulation_fusion=False))
    assert mem.stages[0].phase == "backward_end"
    assert mem.total == params * 8 + 3 * table
    got = predicted_peak_bytes(spec, ModelCase("train", 1, 2048), (9, 0))
    assert abs(got - 12_961_357_312) / 12_961_357_312 < 0.005
    # Megatron-LM's gradient-accumulation fusion writes the head's gradient into its buffer: one block is left
    fused = train_memory(spec, TrainOptions(batch=1, seq=2048, master_weights=False))
    assert fused.stages[0].phases["backward_end"] == params * 8 + table
    # gradients set to None (torch, one micro-batch): the sum becomes the gradient, two blocks beyond them
    torch = train_memory(spec, TrainOptions(batch=1, seq=2048, master_weights=False, framework="torch"))
    assert torch.stages[0].phases["backward_end"] == params * 8 + 2 * table
