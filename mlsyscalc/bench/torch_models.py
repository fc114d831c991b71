"""Plain-torch decoder models built from a ModelSpec, for checking the memory calculator
against real allocations. Import torch lazily: `build_model` is the entry point.

Mirrors the spec's shapes (count_params matches the built model to the parameter) for
llama-style (RMSNorm, rotary, gated MLP, GQA, Mixtral-style MoE) and GPT-2-style (LayerNorm,
learned positions, GeLU MLP, biases) specs; MLA is not built. Norms and rotary use small
autograd Functions that save only their input (as fused Megatron-LM / Transformer Engine
kernels do), so the tensors saved for backward are the ones `calc.activations` lists.
"""

from __future__ import annotations

import math


def build_model(spec, dtype="bfloat16", device="cpu", flash=True, checkpoint=False):
    import torch

    from ._torch_layers import Decoder

    require_supported(spec)
    with torch.device(device):
        model = Decoder(spec, flash=flash, checkpoint=checkpoint)
    return model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)


def require_supported(spec) -> None:
    from ..errors import require

    require(spec.mla is None, f"{spec.name}: the torch builder has no MLA attention")
    require(not spec.parallel_attention and spec.norms_per_layer == 2, f"{spec.name}: only pre-norm sequential blocks are built")
    require(spec.embed_proj_dim is None and not spec.qk_norm, f"{spec.name}: OPT projections / qk norms are not built")
    require(spec.position_embedding in ("rope", "learned"), f"{spec.name}: position embedding {spec.position_embedding}")


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


def rope_tables(seq: int, dim: int, theta: float = 10000.0, device=None, dtype=None):
    import torch

    inv = 1.0 / theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)  # (S, D/2)
    ang = torch.cat([ang, ang], dim=-1)  # (S, D)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def init_scale(fan_in: int) -> float:
    return 1.0 / math.sqrt(fan_in)
