"""Multi-GPU whole-model runs: tensor parallel through DTensor, FSDP2 data parallel, under torchrun.

    torchrun --nproc-per-node 2 -m mlsyscalc bench model llama3-8b --phase prefill --tp 2 ...
    torchrun --nproc-per-node 4 -m mlsyscalc bench model llama3-8b --phase train --fsdp ...

Tensor parallel follows Megatron-LM (Shoeybi et al. 2019, section 3), as `calc.roofline.model`
prices it: q/k/v and gate/up column-parallel, o_proj and down_proj row-parallel (an all-reduce
after each), with torch's `parallelize_module`; each rank's attention then runs its heads / tp
query heads and kv_heads / tp KV heads. Embeddings, norms and the lm_head stay replicated (the
roofline splits the vocabulary: a small difference at these sizes). FSDP2 (`fully_shard` per
layer, then the model) shards parameters, gradients and AdamW states over all ranks (ZeRO-3).
torch's own parallelism only: no hand-written collectives.
"""

from __future__ import annotations

import os

from ..errors import require


def world() -> tuple[int, int]:
    """(rank, world size): (0, 1) outside torchrun; inside, the process group is initialised
    (NCCL on GPUs, gloo on the CPU) and each rank takes the GPU of its LOCAL_RANK."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return 0, 1
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return dist.get_rank(), dist.get_world_size()


def check_parallel(spec, tp: int, fsdp: bool, size: int) -> None:
    """One parallelism at a time, matching the torchrun process count."""
    require(not (fsdp and tp > 1), "--tp and --fsdp together are not built (one or the other)")
    if fsdp:
        require(size > 1, "--fsdp needs several processes: torchrun --nproc-per-node N -m mlsyscalc bench model ...")
        return
    require(tp == size, f"--tp {tp} needs exactly {tp} processes (torchrun --nproc-per-node {tp}), found {size}")
    if tp == 1:
        return
    require(spec.moe is None and spec.mla is None, f"{spec.name}: --tp is built for dense attention models only")
    require(spec.num_heads % tp == 0 and spec.num_kv_heads % tp == 0,
            f"{spec.name}: {spec.num_heads} query / {spec.num_kv_heads} KV heads do not split over --tp {tp}")


TP_PLAN = {"attn.q_proj": "col", "attn.k_proj": "col", "attn.v_proj": "col", "attn.o_proj": "row",
           "mlp.gate_proj": "col", "mlp.up_proj": "col", "mlp.down_proj": "row"}


def apply_tp(model, tp: int, device_type: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device_type, (tp,))
    styles = {"col": ColwiseParallel, "row": RowwiseParallel}
    for layer in model.layers:
        plan = {name: styles[kind]() for name, kind in TP_PLAN.items() if _present(layer, name)}
        parallelize_module(layer, mesh, plan)
        layer.attn.heads //= tp
        layer.attn.kv_heads //= tp
    model.tp = tp


def _present(module, path: str) -> bool:
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:  # a plain (non-gated) MLP has no gate_proj
            return False
    return True


def apply_fsdp(model) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)


def max_over_ranks(value: float) -> float:
    """The slowest rank's time (a step ends when every rank has finished)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())
