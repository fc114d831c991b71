"""Measured training steps on one host with torch.distributed's own parallelism, for `mlsys train`.

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 4 scripts/train_measure.py --case fsdp --out DIR
    python scripts/validate/train_compare.py DIR/train_rows.jsonl --cluster hgx-h200   # table vs mlsys train

The layout is the one `mlsys train` prices: bf16 weights, activations and gradients, fp32 master weights
and AdamW moments (16 bytes a parameter), one fused AdamW kernel over each decoder layer's parameters.
Every case does the same work per GPU (--seqs-per-gpu sequences of --seq tokens a step):
  single       one GPU, no communication: the compute + optimizer reference of the per-GPU work
  ddp          DistributedDataParallel over all ranks (ZeRO-0): bf16 gradient all-reduce in buckets
  fsdp         FSDP2 `fully_shard` per decoder layer and the root (ZeRO-3): fp32 sharded parameters,
               MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fused AdamW on the shards
  fsdp-zero2   the same with reshard_after_forward=False on the layers (ZeRO-2, FSDP1's SHARD_GRAD_OP): each
               layer's gathered bf16 parameters stay from its forward to its backward, no backward all-gather
  tp           DTensor tensor parallel: q/k/v/gate/up colwise, o/down rowwise, vocab-parallel embedding and
               lm_head with loss_parallel (Megatron's split, no sequence parallelism)
  pp-gpipe, pp-1f1b, pp-interleaved
               torch.distributed.pipelining: ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B (2 stages a
               rank), 2 x stages micro-batches of one sequence
  fsdp-tp      (ranks / 2) x 2 device mesh: TP inside pairs of ranks, FSDP2 across the pairs (2 x 2 on 4 ranks,
               TP 2 x FSDP 4 on 8)
  tp-pp        2 x (ranks / 2) device mesh: DTensor TP (as tp, vocabulary not split) over half the ranks inside each
               of 2 pipeline stages, Schedule1F1B across them, 2 x ranks micro-batches of one sequence (TP 2 x PP 2
               on 4 ranks, TP 4 x PP 2 on 8)
The model (--model) is a llama built from a ModelSpec by mlsyscalc.bench.torch_models.build_model (the same seed in
every case, so the first losses agree): by default the 2.7B of the 2- and 4-GPU runs, llama2-7b as published for
the 8-GPU layouts (scripts/validate/eight_gpu_plan.py), or a tiny one for the CPU. Timing: CUDA-synchronised wall clock of
--steps steps after --warmup steps, split into forward+backward (with the communication it waits for) and the
optimizer; the median per rank, the slowest rank's. Memory: torch.cuda.max_memory_allocated per rank over the timed steps. Rank 0
appends one JSON row a case to DIR/train_rows.jsonl; before each case (on by default with cuda, --host-probe) a
host probe in the same process times a tiny model in the case's layout and records the torch host costs it
solves as the row's `host_probe` (scripts/train_host_probe.py). On the CPU (`--device cpu`, gloo) the same code runs as
a smoke test (times say nothing).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_host_probe import PROBE_SEQ, PROBE_STEPS, host_probe  # noqa: E402

CASES = ("single", "ddp", "fsdp", "fsdp-zero2", "tp", "pp-gpipe", "pp-1f1b", "pp-interleaved", "fsdp-tp", "tp-pp")
# A 2.7B llama (hidden 2560, 32 layers, 20 heads of 128, MLP 6912, vocab 32000): big enough that a step of
# 2 x 2048 tokens a GPU is compute-bound on an H200 (about 35 TFLOP of matmuls a GPU).
MODEL = ("llama2-7b", {"hidden_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 20,
                       "num_key_value_heads": 20, "intermediate_size": 6912})
# 8 heads of 8, so that TP splits them over up to 8 CPU ranks
TINY = ("llama2-7b", {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
                      "intermediate_size": 128, "vocab_size": 256})
# llama2-7b as published (hidden 4096, 32 layers, 32 heads of 128, MLP 11008, vocab 32000): the 8-GPU layouts
MODELS = {"llama-2.7b": MODEL, "llama2-7b": ("llama2-7b", {}), "tiny": TINY}


def layout(case: str, world: int, per_gpu: int = 2) -> dict[str, int]:
    """dp, tp, pp, vp, micro_batch and micro-batches per step of a case on `world` ranks (`mlsys train`'s flags);
    ValueError for a case the ranks cannot run."""
    if case == "single" and world != 1:
        raise ValueError("single is the one-GPU reference: run it on 1 rank")
    if case in ("fsdp-tp", "tp-pp") and (world < 4 or world % 2):
        raise ValueError(f"{case} splits the ranks in two halves of at least 2: run it on an even number of at "
                         f"least 4 ranks, not {world}")
    base = {"dp": 1, "tp": 1, "pp": 1, "vp": 1, "micro_batch": per_gpu, "micro_batches": 1}
    if case == "fsdp-tp":  # TP inside pairs of ranks, FSDP2 across the pairs
        return base | {"dp": world // 2, "tp": 2, "micro_batch": 2 * per_gpu}
    if case == "tp":
        return base | {"tp": world, "micro_batch": world * per_gpu}
    if case == "tp-pp":  # 2 pipeline stages of TP over half the ranks
        return base | {"tp": world // 2, "pp": 2, "micro_batch": 1, "micro_batches": per_gpu * world}
    if case.startswith("pp-"):
        return base | {"pp": world, "vp": 2 if case == "pp-interleaved" else 1, "micro_batch": 1,
                       "micro_batches": per_gpu * world}
    return base | {"dp": world}


def _local(t):
    """The rank's own shard of a DTensor, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _local_grad(p):
    """The rank's shard of p's gradient, laid out as p (the vocab-parallel embedding's comes back replicated)."""
    g = p.grad
    if hasattr(g, "placements") and tuple(g.placements) != tuple(p.placements):
        g = g.redistribute(p.device_mesh, p.placements)
    return _local(g)


class MixedAdamW:
    """Megatron-style mixed precision: bf16 weights and gradients, an fp32 master copy and fp32 moments; one
    fused AdamW per parameter group (a decoder layer), whose fp32 gradient copy lives only during its step."""

    def __init__(self, groups, lr: float):
        import torch

        self.groups = []
        for params in groups:
            with torch.no_grad():
                masters = [_local(p).detach().float() for p in params]
            self.groups.append((params, masters, torch.optim.AdamW(masters, lr=lr, fused=True)))

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for params, masters, opt in self.groups:
                for p, m in zip(params, masters):
                    m.grad = _local_grad(p).float()
                opt.step()
                for p, m in zip(params, masters):
                    _local(p).copy_(m)
                    m.grad = None

    def zero_grad(self) -> None:
        for params, _, _ in self.groups:
            for p in params:
                p.grad = None


def layer_groups(modules) -> list[list]:
    """One parameter group per decoder layer, and one of the rest (embedding, norm, lm_head) per module."""
    groups = []
    for mod in modules:
        inside = {id(p) for layer in mod.layers for p in layer.parameters()}
        groups += [list(layer.parameters()) for layer in mod.layers]
        rest = [p for p in mod.parameters() if id(p) not in inside]
        groups += [rest] if rest else []
    return groups


def tp_plan(model, mesh, vocab: bool) -> None:
    """Megatron's split with DTensor: column-parallel in, row-parallel out, local heads per rank; with `vocab`
    the embedding and lm_head are split over the vocabulary too (the loss then runs under loss_parallel)."""
    from torch.distributed.tensor import Replicate, Shard
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
    if vocab:
        parallelize_module(model, mesh, {"embed": RowwiseParallel(input_layouts=Replicate()),
                                         "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})


def shard_fsdp(model, mesh, reshard: bool = True) -> None:
    """FSDP2 on every decoder layer and the root; reshard=False keeps each layer's gathered parameters from its
    forward to its backward (ZeRO-2, FSDP1's SHARD_GRAD_OP; the root keeps them either way)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=policy)


def _loss(logits, targets):
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


class StageModule:
    """Layers of one pipeline stage; the first stage embeds, the last applies the norm and the head (bf16 logits:
    the loss casts them). Holds only its own modules and the rope tables, so the rest of the model is freed."""

    @staticmethod
    def build(embed, layers, norm, head, cos, sin):
        from torch import nn

        class Module(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed, self.layers, self.norm, self.lm_head = embed, nn.ModuleList(layers), norm, head
                self.register_buffer("cos", cos, persistent=False)
                self.register_buffer("sin", sin, persistent=False)

            def forward(self, x):
                if self.embed is not None:
                    x = self.embed(x)
                for layer in self.layers:
                    x = layer(x, self.cos, self.sin)
                return self.lm_head(self.norm(x)) if self.lm_head is not None else x
        return Module()


def stage_module(model, lo: int, hi: int, seq: int, like):
    """Layers [lo, hi) of the model as a StageModule (no reference to `model` survives the call)."""
    first, last = lo == 0, hi == len(model.layers)
    cos, sin = model.rope(0, seq, like)  # the model's own (S, 1, D) tables and rope_theta
    return StageModule.build(model.embed if first else None, list(model.layers[lo:hi]),
                             model.norm if last else None, model.lm_head if last else None, cos, sin)


def pipeline_case(model, case: str, rank: int, world: int, n_micro: int, seq: int, device, group=None):
    """(step function, modules of this rank) of a pipeline case; `rank` and `world` count pipeline stages
    (over `group`, default all ranks)."""
    import torch
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    per_rank = 2 if case == "pp-interleaved" else 1
    stages_total = world * per_rank
    bounds = [round(i * len(model.layers) / stages_total) for i in range(stages_total + 1)]
    indices = [rank + k * world for k in range(per_rank)]  # interleaved: rank r holds stages r, r + world
    like = torch.empty(0, dtype=torch.bfloat16, device=device)
    mods = [stage_module(model, bounds[i], bounds[i + 1], seq, like) for i in indices]
    stages = [PipelineStage(m, i, stages_total, device, group=group) for m, i in zip(mods, indices)]
    if case == "pp-interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_micro, loss_fn=_loss)
    else:
        schedule = (ScheduleGPipe if case == "pp-gpipe" else Schedule1F1B)(stages[0], n_micro, loss_fn=_loss)
    first, last = 0 in indices, stages_total - 1 in indices

    def step(ids, targets):
        losses = []
        args = (ids,) if first else ()
        schedule.step(*args, **({"target": targets, "losses": losses} if last else {}))
        return float(losses[0]) if losses else None
    return step, mods


def logits_forward(model) -> None:
    """model(ids) returns the (vocab-sharded) logits instead of the loss: called through the module, so FSDP's
    root hooks still gather the embedding, final norm and head."""
    import types

    model.forward = types.MethodType(lambda self, ids: self.lm_head(self.hidden(ids)), model)


def plain_step(model, vocab_parallel: bool):
    """forward + backward of the whole model on one micro-batch; with `vocab_parallel` the loss is TP's
    (the model must answer logits: `logits_forward`)."""
    def step(ids, targets):
        if vocab_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            logits = model(ids)
            with loss_parallel():
                loss = _loss(logits, targets)
                loss.backward()
            return float(loss.full_tensor() if hasattr(loss, "full_tensor") else loss)
        loss = model(ids, targets)
        loss.backward()
        return float(loss)
    return step


def tp_mesh(device, world: int, tp: int):
    """A device mesh over all ranks (tp = world) or this rank's group of tp consecutive ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    if tp == world:
        return init_device_mesh(device.type, (world,))
    return init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))["tp"]


def build_case(case: str, spec, world: int, rank: int, lay: dict, seq: int, device, vocab: bool = True):
    """(step(ids, targets), optimizer) of a case; `vocab`: tp splits the embedding and head over the vocabulary
    (the host probe's TP step of tp-pp does not, as tp-pp)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from mlsyscalc.bench.torch_models import build_model

    model = build_model(spec, "float32", device, flash=True)
    if case in ("fsdp", "fsdp-zero2", "fsdp-tp"):
        if case == "fsdp-tp":
            mesh = init_device_mesh(device.type, (lay["dp"], lay["tp"]), mesh_dim_names=("dp", "tp"))
            tp_plan(model, mesh["tp"], vocab=True)
            logits_forward(model)
            shard_fsdp(model, mesh["dp"])
        else:
            shard_fsdp(model, init_device_mesh(device.type, (world,)), reshard=case == "fsdp")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
        return plain_step(model, vocab_parallel=case == "fsdp-tp"), opt
    model = model.to(torch.bfloat16)
    if case == "tp-pp":
        mesh = init_device_mesh(device.type, (lay["pp"], lay["tp"]), mesh_dim_names=("pp", "tp"))
        tp_plan(model, mesh["tp"], vocab=False)
        step, mods = pipeline_case(model, "pp-1f1b", mesh["pp"].get_local_rank(), lay["pp"], lay["micro_batches"], seq,
                                   device, group=mesh["pp"].get_group())
        del model
        return step, MixedAdamW(layer_groups(mods), lr=1e-5)
    if lay["pp"] > 1:
        step, mods = pipeline_case(model, case, rank, world, lay["micro_batches"], seq, device)
        del model
        return step, MixedAdamW(layer_groups(mods), lr=1e-5)
    if case == "tp":
        tp_plan(model, tp_mesh(device, world, lay["tp"]), vocab=vocab)
        if vocab:
            logits_forward(model)
    groups = layer_groups([model])
    if case == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, gradient_as_bucket_view=True)
        return (lambda ids, targets: _backward(wrapped(ids, targets))), MixedAdamW(groups, lr=1e-5)
    return plain_step(model, vocab_parallel=case == "tp" and vocab), MixedAdamW(groups, lr=1e-5)


def _backward(loss) -> float:
    loss.backward()
    return float(loss)


def profile_steps(one_step, sync, trace_to: Path, steps: int = 2) -> dict:
    """GPU time of `steps` more steps under torch.profiler, by kernel class (scripts/trace_summary.py); the
    Chrome trace is written to trace_to (gzipped)."""
    import gzip
    import shutil

    import torch
    from torch.profiler import ProfilerActivity, profile

    from trace_summary import load, summarize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            one_step()
        sync()
    plain = trace_to.with_suffix("")
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(trace_to, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()
    return summarize(load(trace_to), steps)


def measure(case: str, spec, lay: dict, seq: int, warmup: int, steps: int, device,
            trace_to: Path | None = None, vocab: bool = True) -> dict:
    """Run the case; this rank's median step, forward+backward and optimizer times and peak memory (and, with
    trace_to, a profile of two more steps)."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    torch.manual_seed(0)  # the same initial weights in every case: the first losses agree
    step, opt = build_case(case, spec, world, rank, lay, seq, device, vocab)
    gc.collect()
    # One micro-batch of tokens, the same on every rank and in every case, repeated for a pipeline's micro-batches.
    draw = lambda seed: torch.randint(0, spec.vocab_size, (lay["micro_batch"], seq), device=device,  # noqa: E731
                                      generator=torch.Generator(device=device).manual_seed(seed))
    n = lay["micro_batches"] if lay["pp"] > 1 else 1
    ids, targets = draw(0).repeat(n, 1), draw(1).repeat(n, 1)
    times, first_loss = [], None
    for k in range(warmup + steps):
        if k == warmup and cuda:
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        loss = step(ids, targets)
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        sync()
        times.append((time.perf_counter() - t0, t1 - t0, time.perf_counter() - t1))
        first_loss = loss if k == 0 else first_loss
    timed = times[warmup:]
    one_step = lambda: (step(ids, targets), opt.step(), opt.zero_grad())  # noqa: E731
    profile = profile_steps(one_step, sync, trace_to) if trace_to else None
    return {"profile": profile, "step_time_s": statistics.median(t[0] for t in timed),
            "fwd_bwd_s": statistics.median(t[1] for t in timed),
            "optimizer_s": statistics.median(t[2] for t in timed), "first_loss": first_loss,
            "peak_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0}


def run(args) -> None:
    import torch
    import torch.distributed as dist

    from mlsyscalc.specs.lookup import load_model

    cuda = args.device == "cuda"
    restrict_sdpa(args.sdpa_backend)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    base, overrides = MODELS["tiny" if args.tiny else args.model]
    spec = load_model(base, overrides)
    probing = args.device == "cuda" if args.host_probe is None else args.host_probe
    for case in args.case:
        lay = layout(case, world, args.seqs_per_gpu)
        probe_now = lambda: host_probe(measure, case, spec, lay, device, seq=args.probe_seq,  # noqa: E731
                                       steps=args.probe_steps)
        probe = probe_now() if probing else None
        trace_to = Path(args.profile) / f"trace_{case}_rank{rank}.json.gz" if args.profile else None
        mine = measure(case, spec, lay, args.seq, args.warmup, args.steps, device, trace_to)
        after = probe_now() if probing and args.probe_after else None
        every = [None] * world
        dist.all_gather_object(every, mine)
        if rank == 0:
            row = {"case": case, "model": {"base": base, "overrides": overrides}, "gpus": world, **lay,
                   "seq": args.seq, "global_batch": lay["micro_batch"] * lay["micro_batches"] * lay["dp"],
                   **{k: max(r[k] for r in every) for k in ("step_time_s", "fwd_bwd_s", "optimizer_s")},
                   "first_loss": next(r["first_loss"] for r in every if r["first_loss"] is not None),
                   "peak_bytes_per_rank": [r["peak_bytes"] for r in every],
                   **({"profile_per_rank": [r["profile"] for r in every]} if args.profile else {}),
                   **({"host_probe": probe} if probe else {}),
                   **({"host_probe_after": after} if after else {}),
                   "warmup": args.warmup, "steps": args.steps, "sdpa_backend": args.sdpa_backend,
                   "env": {"torch": torch.__version__, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                           "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
                           "nvls": os.environ.get("NCCL_NVLS_ENABLE"),
                           "commit": os.environ.get("MLSYS_GIT_COMMIT", "")}}
            with open(Path(args.out) / "train_rows.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
        dist.barrier()
    dist.destroy_process_group()


SDPA_BACKENDS = ("default", "flash", "cudnn")


def restrict_sdpa(backend: str) -> None:
    """Leave SDPA only `backend` ("flash": FlashAttention-2, "cudnn"; "default": torch's own choice). A shape the
    backend cannot run then fails instead of falling back, so a row's backend is the one that ran."""
    if backend == "default":
        return
    import torch

    for name in ("flash", "cudnn", "mem_efficient", "math"):
        getattr(torch.backends.cuda, f"enable_{name}_sdp")(name == backend)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", choices=CASES, required=True, help="repeatable")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seqs-per-gpu", type=int, default=2, help="sequences of work per GPU a step")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile", help="profile two more steps; Chrome traces (gzipped) go to this folder")
    ap.add_argument("--model", default="llama-2.7b", choices=tuple(MODELS),
                    help="llama-2.7b: the 2.7B of the 2- and 4-GPU runs; llama2-7b: the built-in as published; "
                         "tiny: as --tiny [default: llama-2.7b]")
    ap.add_argument("--tiny", action="store_true", help="a 4-layer 64-wide llama (CPU smoke test; --model tiny)")
    ap.add_argument("--sdpa-backend", default="default", choices=SDPA_BACKENDS,
                    help="the only SDPA backend left on (the row's sdpa_backend; mlsys train --attention flash2 "
                         "prices flash on Hopper) [default: torch's choice]")
    ap.add_argument("--host-probe", action=argparse.BooleanOptionalAction, default=None,
                    help="before each case, time the tiny model in its layout and solve the torch host costs "
                         "(scripts/train_host_probe.py; the row's host_probe) [default: on with cuda]")
    ap.add_argument("--probe-seq", type=int, default=PROBE_SEQ, help="tokens per sequence of the probe's steps")
    ap.add_argument("--probe-steps", type=int, default=PROBE_STEPS, help="timed steps of each probe step")
    ap.add_argument("--probe-after", action="store_true",
                    help="probe again after the case (the row's host_probe_after: how far the host moved meanwhile)")
    args = ap.parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    for case in args.case:  # before any process group: a layout the ranks cannot run is bad usage (exit 2)
        try:
            layout(case, world, args.seqs_per_gpu)
        except ValueError as exc:
            ap.error(str(exc))
    run(args)


if __name__ == "__main__":
    main()
    # Leave without interpreter finalization: gloo's worker threads can still hold work objects whose release then
    # aborts the process (SIGABRT, "terminate called without an active exception"; pytorch/pytorch PR 179291),
    # the likeliest cause of one failed CPU test run in about ten (rank 1 aborted so; not reproduced in 8 more).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
