"""Check `mlsys memory train --zero 3 --dp N` against an FSDP2 run: torch.cuda.max_memory_allocated per rank.

    for k in 0 1 2 3; do torchrun --nproc_per_node 2 scripts/validate/fsdp_memory.py --case $k --out DIR; done

Each case builds a scaled-down model of mlsyscalc.bench.cases.memory on every rank in fp32, wraps each decoder
layer and then the root in `fully_shard` (FSDP2) with bf16 compute and fp32 gradient reduction
(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)), and runs two AdamW steps (torch.optim.AdamW,
foreach=False, so the update makes no whole-model temporaries); the second is measured. FSDP2 keeps fp32 sharded
parameters (the master weights), fp32 sharded gradients and fp32 moments: 16 bytes a parameter over N ranks, the
total the calculator's ZeRO-3 (2 + 2 + 12 bytes over N) counts, split differently. Rank 0 appends one JSON row a
case to DIR/fsdp_rows.jsonl with the measured and predicted bytes. Needs N CUDA GPUs (NCCL); on the CPU
(`--device cpu`, gloo) it only runs the steps, as a smoke test. `--table ROWS` prints the markdown table of
reports/memory/fsdp.md from a rows file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

# (model label in cases/memory.py MODELS, micro-batch, sequence, activation checkpointing)
CASES = [("llama-1b (MHA)", 4, 2048, False), ("llama-1b (MHA)", 8, 2048, True),
         ("llama3-1.5b (GQA 32/8, vocab 128k)", 4, 2048, False), ("gpt2-xl (1.6B, LayerNorm, GeLU)", 4, 1024, False)]


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def run_case(label, batch, seq, checkpoint, device, world, spec=None) -> dict:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from mlsyscalc.bench.cases.memory import spec_for
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.calc.memory.training import TrainOptions, train_memory

    spec = spec or spec_for(label)
    cuda = device.startswith("cuda")
    start_bytes = torch.cuda.memory_allocated() if cuda else 0   # what earlier cases left: should be ~0
    model = build_model(spec, "float32", device, flash=True, checkpoint=checkpoint)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    gen = torch.Generator(device=device).manual_seed(torch.distributed.get_rank())
    ids = torch.randint(0, spec.vocab_size, (batch, seq), device=device, generator=gen)
    targets = torch.randint(0, spec.vocab_size, (batch, seq), device=device, generator=gen)
    marks = {}

    def step(measure=False):
        loss = model(ids, targets)  # noqa: F821 - deleted after the last call
        if measure and cuda:
            marks["after_forward"] = torch.cuda.memory_allocated()
        loss.backward()
        opt.step()  # noqa: F821 - deleted after the last call
        opt.zero_grad(set_to_none=False)  # noqa: F821 - deleted after the last call

    step()   # allocates the sharded gradients and the optimizer's moments
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        marks["before"] = torch.cuda.memory_allocated()
    step(measure=True)
    if cuda:
        torch.cuda.synchronize()
    params = list(model.parameters())
    moments = [t for state in opt.state.values() for t in state.values() if torch.is_tensor(t) and t.dim() > 0]
    predicted = train_memory(spec, TrainOptions(batch=batch, seq=seq, dp=world, zero=3, flash=True,
                                                recompute="full" if checkpoint else "none"))
    row = {
        "model": label, "batch": batch, "seq": seq, "checkpoint": checkpoint, "dp": world,
        "measured": {
            "params_fp32_bytes": _local_bytes(params),
            "grads_fp32_bytes": _local_bytes(p.grad for p in params),
            "optimizer_moments_bytes": _local_bytes(moments),
            "forward_saved_bytes": marks.get("after_forward", 0) - marks.get("before", 0),
            "baseline_bytes": marks.get("before", 0),
            "allocated_at_case_start_bytes": start_bytes,
            "peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
        },
        "predicted": {**{f"{k}_bytes": v for k, v in predicted.breakdown.items()},
                      **{f"detail_{k}_bytes": v for k, v in predicted.peak_stage.detail.items()}, "peak_bytes": predicted.total},
    }
    del model, opt, params, moments
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def table(rows_path: Path) -> str:
    """The markdown table of reports/memory/fsdp.md from the rows file (no GPU, no process group)."""
    gib, mib = 2 ** 30, 2 ** 20
    from mlsyscalc.report.markdown import markdown_table

    out = []
    for line in rows_path.read_text().splitlines():
        r = json.loads(line)
        m, p = r["measured"], r["predicted"]
        states = m["params_fp32_bytes"] + m["grads_fp32_bytes"] + m["optimizer_moments_bytes"]
        states_pred = p["weights_bytes"] + p["gradients_bytes"] + p["optimizer_bytes"]
        err = 100 * (p["peak_bytes"] - m["peak_bytes"]) / m["peak_bytes"]
        case = f"b{r['batch']} s{r['seq']}" + (" ckpt" if r["checkpoint"] else "")
        out.append([r['model'], case, f"{states / gib:.3f} / {states_pred / gib:.3f}",
                    f"{m['forward_saved_bytes'] / gib:.3f}",
                    f"{p['peak_bytes'] / gib:.3f} / {m['peak_bytes'] / gib:.3f} ({err:+.2f}%)",
                    f"{(m['peak_bytes'] - p['peak_bytes']) / mib:+.0f}"])
    columns = ["model", "case", "sharded states meas / pred GiB", "forward_saved meas GiB", "peak pred / meas GiB (err)",
               "peak: measured - predicted MiB"]
    return "\n".join(markdown_table(columns, out, "l" * len(columns)))


def main() -> None:
    import torch
    import torch.distributed as dist

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--case", type=int, action="append",
                    help="run case K of CASES (0-based; repeatable; default all). One case a process measures cleanly:"
                         " in one process an earlier case's optimizer states outlived it, even after gc.collect()")
    ap.add_argument("--tiny", action="store_true", help="one 2-layer llama at 1 x 64 tokens instead (smoke test)")
    ap.add_argument("--table", type=Path, help="print the markdown table of this rows file and exit")
    a = ap.parse_args()
    if a.table:
        print(table(a.table))
        return
    cuda = a.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    env = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else "cpu",
           "commit": os.environ.get("MLSYS_GIT_COMMIT", "")}
    cases = [(*CASES[k], None) for k in (a.case if a.case is not None else range(len(CASES)))]
    if a.tiny:
        from dataclasses import replace

        from mlsyscalc.specs.lookup import load_model

        tiny = load_model("llama2-7b", {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                                        "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1024})
        cases = [("tiny llama", 1, 64, False, replace(tiny, name="tiny llama"))]
    for label, batch, seq, checkpoint, spec in cases:
        row = run_case(label, batch, seq, checkpoint, device, world, spec)
        rows = [None] * world
        dist.all_gather_object(rows, row["measured"])
        if rank == 0:
            row["measured_per_rank"] = rows
            row["env"] = env
            with open(Path(a.out) / "fsdp_rows.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
