"""Kernel time of the unfused attention core that Megatron-LM ran before flash attention.

`mlsys train --attention unfused`: the attention core of one layer is not one flash kernel (the
roofline's `predict_attention`, causal tiles skipped, no S x S tensor in memory) but the sequence
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", section
4.1) describe and size: Q K^T over the full S x S rectangle, a fused scale + causal mask + softmax,
dropout on the probabilities, and the probabilities times V; each S x S tensor is written to and read
back from memory. Per micro-batch on one GPU, with a = heads / tp local heads, b sequences, d and dv
the query/key and value head widths (B = b a batched products, E = B S^2 score elements, 2 bytes each,
the dropout mask 1 byte):

    forward   Q K^T (S x d . d x S)            matmul, B batches
              scale + mask + softmax           read 2E, write 2E bytes
              dropout                          read 2E, write 2E + E (mask)
              P V (S x S . S x dv)             matmul, B batches
    backward  dP = dO V^T, dV = P^T dO         2 matmuls
              dropout backward                 read 2E + E (mask), write 2E
              softmax backward                 read 4E (probabilities, gradient), write 2E
              dQ = dS K, dK = dS^T Q           2 matmuls

Every kernel is timed by the roofline's own `predict_matmul` and `predict_memory_op`, so the same
ceilings (datasheet or calibrated) apply. Megatron-LM's attention dropout is 0.1 in the GPT runs of
Narayanan et al. 2021 and Korthikanti et al. 2022, hence the dropout kernels.
"""

from __future__ import annotations

from ...errors import require
from ...specs.model import ModelSpec
from ..roofline.calibration import Ceilings
from ..roofline.ops import OpPrediction, predict_matmul, predict_memory_op

ATTENTION = ("flash", "flash2", "triton", "unfused")
# `--attention flash2`: a FlashAttention-2-generation kernel, which Hopper runs below its own flash kernels
# (calc.roofline.calibration's Efficiency.attention_flash2); elsewhere it is the flash kernel of its card.
FLASH2_ARCHITECTURES = ("Hopper",)
# `--attention triton`: the Triton flash-attention kernel of 2022 (flash-attn's flash_attn_triton.py, which
# llm-foundry ships as llmfoundry/models/layers/flash_attn_triton.py and runs with attn_impl triton, on the
# pre-MLIR Triton). Dao 2023, "FlashAttention-2" (arXiv 2307.08691), section 4.1, A100 80GB, head dims 64 and 128,
# sequences 512-16k, with and without the causal mask: FlashAttention-2 is "around 1.3-1.5x faster than
# FlashAttention in Triton in the forward pass and around 2x faster in the backward pass". So each pass of the
# attention core takes the FlashAttention-2-generation kernel's time (`flash2`'s ceilings) times these; the
# forward is the middle of the paper's range. Published, not fitted. A recomputed forward is a forward.
TRITON_PASS_SLOWDOWN = {"forward": 1.4, "backward": 2.0}


def attention_ceilings(ceilings: Ceilings, attention: str) -> Ceilings:
    """The ceilings a step with this attention core is priced with: with `flash2` (and `triton`, which is priced
    from it: attention_pass_scale) on Hopper the attention kernels run at efficiency.attention_flash2, and the small-head class keeps its ratio to `attention`;
    otherwise `ceilings` itself. Applying it twice changes nothing."""
    e = ceilings.efficiency
    if attention not in ("flash2", "triton") or ceilings.gpu.architecture not in FLASH2_ARCHITECTURES or e.attention == e.attention_flash2:
        return ceilings
    scale = e.attention_flash2 / e.attention
    return ceilings.with_efficiency(attention=e.attention_flash2,
                                    attention_small_head=min(1.0, e.attention_small_head * scale))


def attention_pass_scale(attention: str) -> dict[str, float] | None:
    """What each pass of the flash attention core's time is multiplied by: TRITON_PASS_SLOWDOWN for `triton`,
    else None (the kernel's own roofline time)."""
    return dict(TRITON_PASS_SLOWDOWN) if attention == "triton" else None


def unfused_attention_ops(spec: ModelSpec, ceilings: Ceilings, *, tp: int, micro_batch: int, seq: int,
                          dtype: str = "bf16") -> dict[str, list[OpPrediction]]:
    """The kernels of one layer's attention core for one micro-batch, per pass (module docstring)."""
    require(spec.num_heads % tp == 0, f"{spec.num_heads} heads do not split over --tp {tp}")
    batches = micro_batch * spec.num_heads // tp
    s, d, dv = seq, spec.head_dim, spec.v_head_dim
    elems = float(batches) * s * s
    mm = lambda name, m, n, k: predict_matmul(m, n, k, dtype, ceilings, batch=batches, name=name)  # noqa: E731
    mem = lambda name, r, w: predict_memory_op(name, r, w, 0.0, dtype, ceilings)  # noqa: E731
    forward = [mm("attention scores Q K^T", s, s, d), mem("scale + mask + softmax", 2 * elems, 2 * elems),
               mem("attention dropout", 2 * elems, 3 * elems), mm("probabilities x V", s, dv, s)]
    backward = [mm("dP = dO V^T", s, s, dv), mm("dV = P^T dO", s, dv, s),
                mem("attention dropout backward", 3 * elems, 2 * elems),
                mem("softmax backward", 4 * elems, 2 * elems),
                mm("dQ = dS K", s, d, s), mm("dK = dS^T Q", s, d, s)]
    return {"forward": forward, "backward": backward}


def unfused_attention_s(spec: ModelSpec, ceilings: Ceilings, *, tp: int, micro_batch: int, seq: int,
                        dtype: str = "bf16") -> dict[str, float]:
    """Seconds of one layer's unfused attention core per pass: {"forward": f, "backward": b}."""
    ops = unfused_attention_ops(spec, ceilings, tp=tp, micro_batch=micro_batch, seq=seq, dtype=dtype)
    return {name: sum(op.step_s for op in pass_ops) for name, pass_ops in ops.items()}
