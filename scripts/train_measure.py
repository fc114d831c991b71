"""Measured training steps on one host with torch.distributed's own parallelism, for `mlsys train`.

    torchrun --standalone --nproc_per_node 4 scripts/train_measure.py --case fsdp --out DIR
    python scripts/train_compare.py DIR/train_rows.jsonl --cluster hgx-h200   # table vs mlsys train

Cases (one dimension at a time over all ranks, and one 2 x 2 combination on 4 ranks):
  fsdp         FSDP2 `fully_shard` on every decoder layer and the root (ZeRO-3), bf16 compute, fp32 reduce
  tp           DTensor tensor parallel: q/k/v/gate/up `ColwiseParallel`, o/down `RowwiseParallel`
  pp-gpipe, pp-1f1b, pp-interleaved
               torch.distributed.pipelining: ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B (2 stages a rank)
  fsdp-tp      2 x 2 device mesh: TP inside pairs of ranks, FSDP2 across them

The model is a llama built from a ModelSpec by mlsyscalc.bench.torch_models.build_model (fp32 master
parameters; TP and PP run their matmuls under bf16 autocast, FSDP2 casts with its MixedPrecisionPolicy);
AdamW. Step time: the median of --steps timed steps after --warmup steps (CUDA-synchronised wall clock, the
slowest rank's); memory: torch.cuda.max_memory_allocated per rank over the timed steps. Rank 0 appends one
JSON row a case to DIR/train_rows.jsonl. Run one case a process for clean memory figures (`start_bytes_per_rank`
shows what earlier cases of the same process left allocated). On the CPU (`--device cpu`, gloo) the same code runs as a smoke
test (times say nothing).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

CASES = ("fsdp", "tp", "pp-gpipe", "pp-1f1b", "pp-interleaved", "fsdp-tp")
# A 1.3B llama (the memory validation's "llama-1b (MHA)") at micro-batch 1 x 2048 tokens.
MODEL = ("llama2-7b", {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
                       "num_key_value_heads": 16, "intermediate_size": 5632})
TINY = ("llama2-7b", {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
                      "intermediate_size": 128, "vocab_size": 256})


def layout(case: str, world: int) -> dict[str, int]:
    """dp, tp, pp, vp of a case on `world` ranks (the flags `mlsys train` gets)."""
    if case == "fsdp-tp":
        if world != 4:
            raise SystemExit("fsdp-tp is the 2 x 2 case: run it on 4 ranks")
        return {"dp": 2, "tp": 2, "pp": 1, "vp": 1}
    base = {"dp": 1, "tp": 1, "pp": 1, "vp": 1}
    key = {"fsdp": "dp", "tp": "tp"}.get(case, "pp")
    return base | {key: world} | ({"vp": 2} if case == "pp-interleaved" else {})


def _autocast(device):
    import torch

    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def shard_tp(model, mesh) -> None:
    """Megatron's split with DTensor: column-parallel in, row-parallel out; local heads per rank."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    tp = mesh.size()
    for layer in model.layers:
        plan = {"attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(), "attn.v_proj": ColwiseParallel(),
                "attn.o_proj": RowwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
        if layer.mlp.gate_proj is not None:
            plan["mlp.gate_proj"] = ColwiseParallel()
        parallelize_module(layer, mesh, plan)
        layer.attn.heads //= tp
        layer.attn.kv_heads //= tp


def shard_fsdp(model, mesh) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)


class Stage:
    """Layers [lo, hi) of the model; the first stage embeds, the last applies the norm and the head."""

    @staticmethod
    def build(model, lo: int, hi: int, seq: int):
        from torch import nn

        class StageModule(nn.Module):
            def __init__(self):
                super().__init__()
                first, last = lo == 0, hi == len(model.layers)
                self.embed = model.embed if first else None
                self.layers = nn.ModuleList(model.layers[lo:hi])
                self.norm, self.lm_head = (model.norm, model.lm_head) if last else (None, None)
                self.head_dim = model.spec.head_dim

            def forward(self, x):
                if self.embed is not None:
                    x = self.embed(x)
                cos, sin = model.rope(0, seq, x)  # the model's own (S, 1, D) tables and rope_theta
                for layer in self.layers:
                    x = layer(x, cos, sin)
                return self.lm_head(self.norm(x)).float() if self.lm_head is not None else x
        return StageModule()


def _loss(logits, targets):
    import torch.nn.functional as F

    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def pipeline_step(model, case: str, rank: int, world: int, micro: int, seq: int, device):
    """(step function, parameters of this rank) for a pipeline case: micro-batches = 2 x stages."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    per_rank = 2 if case == "pp-interleaved" else 1
    stages_total = world * per_rank
    bounds = [round(i * len(model.layers) / stages_total) for i in range(stages_total + 1)]
    indices = [rank + k * world for k in range(per_rank)]  # interleaved: rank r holds stages r, r + world
    mods = [Stage.build(model, bounds[i], bounds[i + 1], seq).to(device) for i in indices]
    stages = [PipelineStage(m, i, stages_total, device) for m, i in zip(mods, indices)]
    n_micro = 2 * stages_total
    if case == "pp-interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_micro, loss_fn=_loss)
    else:
        schedule = (ScheduleGPipe if case == "pp-gpipe" else Schedule1F1B)(stages[0], n_micro, loss_fn=_loss)
    first, last = 0 in indices, stages_total - 1 in indices

    def step(ids, targets):
        losses = []
        with _autocast(device):
            args = (ids,) if first else ()
            schedule.step(*args, **({"target": targets, "losses": losses} if last else {}))
        return float(losses[0]) if losses else None
    params = [p for m in mods for p in m.parameters()]
    return step, params, n_micro


def build_case(case: str, spec, world: int, rank: int, micro: int, seq: int, device):
    """(step(ids, targets), parameters, micro-batches per step, batch rows this rank feeds)."""
    from torch.distributed.device_mesh import init_device_mesh

    from mlsyscalc.bench.torch_models import build_model

    lay = layout(case, world)
    model = build_model(spec, "float32", device, flash=True)
    if lay["pp"] > 1:
        step, params, n_micro = pipeline_step(model, case, rank, world, micro, seq, device)
        return step, params, n_micro, micro * n_micro
    if case == "fsdp-tp":
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("dp", "tp"))
        shard_tp(model, mesh["tp"])
        shard_fsdp(model, mesh["dp"])
    elif case == "tp":
        shard_tp(model, init_device_mesh(device.type, (world,)))
    else:
        shard_fsdp(model, init_device_mesh(device.type, (world,)))

    def step(ids, targets):
        if case == "fsdp":
            loss = model(ids, targets)
        else:
            with _autocast(device):
                loss = model(ids, targets)
        loss.backward()
        return float(loss)
    return step, list(model.parameters()), 1, micro


def measure(case: str, spec, micro: int, seq: int, warmup: int, steps: int, device) -> dict:
    """Run the case; this rank's median step time and peak memory."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    start_bytes = torch.cuda.memory_allocated(device) if cuda else 0  # an earlier case's leftovers: ~0 if clean
    torch.manual_seed(0)  # the same initial weights in every case: the first losses agree
    step, params, n_micro, rows = build_case(case, spec, world, rank, micro, seq, device)
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=False)
    # One micro-batch of tokens, the same on every rank and in every case (TP and PP need it; the first
    # losses of the cases can then be compared), repeated for the micro-batches of a pipeline step.
    draw = lambda seed: torch.randint(0, spec.vocab_size, (micro, seq), device=device,  # noqa: E731
                                      generator=torch.Generator(device=device).manual_seed(seed))
    ids, targets = draw(0).repeat(rows // micro, 1), draw(1).repeat(rows // micro, 1)
    times, first_loss = [], None
    for k in range(warmup + steps):
        if k == warmup and cuda:
            torch.cuda.reset_peak_memory_stats(device)
        if cuda:
            torch.cuda.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        loss = step(ids, targets)
        first_loss = loss if k == 0 else first_loss
        opt.step()
        opt.zero_grad(set_to_none=False)
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) if cuda else 0
    return {"step_time_s": statistics.median(times[warmup:]), "first_loss": first_loss, "start_bytes": start_bytes,
            "peak_bytes": peak, "micro_batches": n_micro, "rows_per_rank": rows}


def run(args) -> None:
    import torch
    import torch.distributed as dist

    from mlsyscalc.specs.lookup import load_model

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    base, overrides = TINY if args.tiny else MODEL
    spec = load_model(base, overrides)
    for case in args.case or [c for c in CASES if c != "fsdp-tp" or world == 4]:
        mine = measure(case, spec, args.micro_batch, args.seq, args.warmup, args.steps, device)
        every = [None] * world
        dist.all_gather_object(every, mine)
        if rank == 0:
            lay = layout(case, world)
            row = {"case": case, "model": {"base": base, "overrides": overrides}, "gpus": world, **lay,
                   "micro_batch": args.micro_batch, "seq": args.seq,
                   "global_batch": args.micro_batch * mine["micro_batches"] * lay["dp"],
                   "step_time_s": max(r["step_time_s"] for r in every),
                   "first_loss": next(r["first_loss"] for r in every if r["first_loss"] is not None),
                   "peak_bytes_per_rank": [r["peak_bytes"] for r in every],
                   "start_bytes_per_rank": [r["start_bytes"] for r in every],
                   "warmup": args.warmup, "steps": args.steps,
                   "env": {"torch": torch.__version__, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                           "commit": os.environ.get("MLSYS_GIT_COMMIT", "")}}
            with open(Path(args.out) / "train_rows.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", choices=CASES, help="repeatable; default all that fit the world size")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tiny", action="store_true", help="a 4-layer 64-wide llama (CPU smoke test)")
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
