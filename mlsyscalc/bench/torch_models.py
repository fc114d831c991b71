"""Plain-torch decoder models built from a ModelSpec: the models `mlsys bench model` times and
the memory validation measures. Import torch lazily: `build_model` is the entry point.

Every family the specs describe is built with the spec's exact shapes (parameter count equal to
`calc.counts.params.count_params`): dense and GQA attention, MoE with routed and shared experts,
DeepSeek MLA, rotary (full or partial) and learned positions, parallel attention, gemma2's four
norms, biases, q/k norms, OPT's project_in/out. Not modelled: ALiBi, sliding-window masks
(attention is full causal), gemma2's logit soft-capping (scalar work, no extra matmul).
The modules live in _torch_layers (norms, rotary, MLP, MoE, quantized linears), _torch_attention
and _torch_decoder.
"""

from __future__ import annotations

KERNELS = ("torch", "triton")  # SDPA/cuBLAS, or the project's Triton attention and weight-only GEMVs


def build_model(spec, dtype="bfloat16", device="cpu", flash=True, checkpoint=False, kernels="torch", quant_bits=None):
    """The model on `device` in `dtype`; quant_bits 8 or 4 replaces the decoder layers' linears
    by weight-only quantized ones (the Triton GEMV / weight-only matmul)."""
    import torch

    from ._torch_decoder import Decoder
    from ._torch_layers import quantize_linears

    require_supported(spec, kernels, quant_bits)
    with torch.device(device):
        model = Decoder(spec, flash=flash, checkpoint=checkpoint, kernels=kernels)
    model = model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    if quant_bits:
        quantize_linears(model.layers, quant_bits)
    return model


def require_supported(spec, kernels="torch", quant_bits=None) -> None:
    from ..errors import require

    require(spec.position_embedding in ("rope", "learned"),
            f"{spec.name}: position embedding {spec.position_embedding} is not built")
    require(spec.norm in ("rmsnorm", "layernorm"), f"{spec.name}: norm {spec.norm} is not built")
    require(spec.norms_per_layer in (1, 2, 4), f"{spec.name}: {spec.norms_per_layer} norms per layer")
    require(spec.norms_per_layer != 1 or spec.parallel_attention, f"{spec.name}: one norm needs parallel attention")
    require(not spec.qk_norm or spec.qk_norm_type == "layernorm", f"{spec.name}: q/k norm {spec.qk_norm_type} is not built")
    require(not (spec.attention_sinks or spec.nope_layers or spec.attention_chunk_size),
            f"{spec.name}: attention sinks, NoPE and chunked layers are not built")
    require(spec.moe is None or not (spec.moe.router_bias or spec.moe.expert_bias or spec.moe.layers is not None),
            f"{spec.name}: MoE biases and listed MoE layers are not built")
    require(kernels in KERNELS, f"kernels must be one of {', '.join(KERNELS)}, got {kernels!r}")
    require(quant_bits in (None, 4, 8), f"weight-only quantization is 8 or 4 bits, got {quant_bits}")
    require(not quant_bits or kernels == "triton", "quantized weights run on the triton kernels (--kernels triton)")


def saved_tensor_bytes(fn, exclude=()):
    """Run fn() under saved_tensors_hooks; bytes of the distinct storages autograd saved,
    excluding those of `exclude` tensors (parameters, buffers). Returns (result, bytes)."""
    import torch

    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip and t.dtype not in (torch.int64, torch.int32, torch.bool):
            seen[ptr] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    return result, sum(seen.values())
