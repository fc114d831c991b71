"""What a training step runs beyond the layers' kernels, timed on one GPU, and a step run long enough to
reach the card's steady clocks.

Ground truth for the training-step ops `mlsys train` prices (docs/train.md, "What the step runs beside the
layers"): the loss as frameworks run it (cross-entropy over the vocabulary on logits cast to fp32, forward and
backward), the embedding's backward (torch's embedding_dense_backward, then the bf16 gradient accumulated into an
fp32 main gradient as Megatron-LM's DDP does for parameters outside its fused GEMMs), gradient clipping
(torch.nn.utils.clip_grad_norm_ over fp32 gradients: a norm pass, then a scale), the fused AdamW step over fp32
master weights, gradients and moments, and dropout before a residual add. Each row: the bytes the op must move,
its median time (do_bench, L2 flushed) and the rate. Then cuBLAS GEMMs of the shapes small-hidden models train with
(TRAINING_GEMMS), bf16, do_bench medians.

`--steady SECONDS`: a model's training step (`--model`, `--layers` of it, micro-batch 1, `--seq`) run back to
back for SECONDS; per step its time, and the card's SM clock, power and throttle reasons over the run
(bench.cases.sustained.CardSampler), to tell whether a step of many kernels settles where a lone GEMM does.

    python scripts/train_ops_measure.py --out rows.jsonl [--steady 25 --model llama3-8b --layers 8 --seq 8192]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
import time
from pathlib import Path


def _rows_ops(device: str):
    import torch
    import torch.nn.functional as F

    from mlsyscalc.bench import harness

    bf16, fp32 = torch.bfloat16, torch.float32

    def ce_case(tokens: int, vocab: int):
        logits = torch.randn(tokens, vocab, device=device, dtype=bf16, requires_grad=True)
        target = torch.randint(0, vocab, (tokens,), device=device)

        def run():
            logits.grad = None
            F.cross_entropy(logits.float(), target).backward()
        return run, tokens * vocab * 2 * 2.0, f"{tokens}x{vocab}"  # read the bf16 logits, write their bf16 grad

    def embedding_case(tokens: int, vocab: int, hidden: int):
        emb = torch.nn.Embedding(vocab, hidden, device=device, dtype=bf16)
        idx = torch.randint(0, vocab, (tokens,), device=device)
        grad_out = torch.randn(tokens, hidden, device=device, dtype=bf16)
        main_grad = torch.zeros(vocab, hidden, device=device, dtype=fp32)

        def run():
            emb.weight.grad = None
            emb(idx).backward(grad_out)
            main_grad.add_(emb.weight.grad)
        # fewest bytes: the incoming gradient read, the dense bf16 gradient written (zero fill + scatter), then
        # read again with the fp32 main gradient and the main gradient written
        dense = vocab * hidden
        return run, tokens * hidden * 2 + dense * 2 + dense * (2 + 4 + 4), f"{tokens}x{vocab}x{hidden}"

    def clip_case(params: int, tensors: int):
        size = params // tensors
        ps = [torch.nn.Parameter(torch.empty(size, device=device, dtype=fp32)) for _ in range(tensors)]
        for p in ps:
            p.grad = torch.randn_like(p)

        def run():
            torch.nn.utils.clip_grad_norm_(ps, 1e-3, foreach=True)  # always clips: the scale pass runs
        return run, params * 4 * 3.0, f"{params}p/{tensors}t"  # norm: read; scale: read + write

    def adamw_case(params: int, tensors: int):
        size = params // tensors
        ps = [torch.nn.Parameter(torch.randn(size, device=device, dtype=fp32)) for _ in range(tensors)]
        for p in ps:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(ps, lr=1e-4, fused=True)
        opt.step()  # the moments exist from here on
        return opt.step, params * (16 + 12.0), f"{params}p/{tensors}t"  # read master, grad, m, v; write master, m, v

    def dropout_add_case(tokens: int, hidden: int):
        x = torch.randn(tokens, hidden, device=device, dtype=bf16)
        residual = torch.randn_like(x)

        def run():
            return residual + F.dropout(x, 0.1, training=True)
        return run, tokens * hidden * 2 * 3.0, f"{tokens}x{hidden}"  # read x and the residual, write the sum

    cases = [("cross_entropy_fp32", ce_case, (16384, 128256)), ("cross_entropy_fp32", ce_case, (16384, 32000)),
             ("cross_entropy_fp32", ce_case, (4096, 151936)),
             ("embedding_backward", embedding_case, (16384, 128256, 4096)),
             ("embedding_backward", embedding_case, (16384, 32000, 8192)),
             ("clip_grad_norm", clip_case, (1 << 30, 256)), ("adamw_fused_fp32", adamw_case, (1 << 29, 256)),
             ("adamw_fused_fp32", adamw_case, (1 << 27, 64)),
             ("dropout_add", dropout_add_case, (16384, 4096)), ("dropout_add", dropout_add_case, (65536, 8192))]
    for name, build, args in cases:
        try:
            fn, nbytes, shape = build(*args)
            fn()
            ms = harness.time_ms(fn)
            yield {"op": name, "shape": shape, "bytes": nbytes, "median_ms": ms, "GBps": nbytes / (ms * 1e-3) / 1e9}
        except Exception as exc:  # noqa: BLE001 - an OOM or a missing op: a row that says so
            yield {"op": name, "shape": str(args), "error": f"{type(exc).__name__}: {exc}"[:300]}
        torch.cuda.empty_cache()


# cuBLAS GEMMs of training steps whose K or N is small (hidden 1024-4096 models): forward (tokens x out x in), input
# gradient (tokens x in x out) and weight gradient (in x out x tokens) shapes of their projections, MxNxK
TRAINING_GEMMS = ("16384x1024x1024", "16384x4096x1024", "16384x1024x4096", "16384x2048x2048", "16384x3072x2048",
                  "16384x8192x2048", "16384x2048x8192", "2048x8192x16384", "2048x2048x16384", "8192x2048x2048",
                  "16384x6144x4096", "16384x4096x14336", "4096x14336x16384", "16384x4096x4096")


def _rows_gemms(device: str):
    """Each TRAINING_GEMMS shape through torch.matmul in bf16, do_bench median (burst clocks)."""
    import torch

    from mlsyscalc.bench import harness

    for shape in TRAINING_GEMMS:
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        ms = harness.time_ms(functools.partial(torch.matmul, a, w.T))
        yield {"op": "cublas_gemm", "shape": shape, "flops": 2.0 * m * n * k, "median_ms": ms,
               "TFLOPps": 2.0 * m * n * k / (ms * 1e-3) / 1e12}


def steady_step(model_name: str, layers: int, seq: int, seconds: float) -> dict:
    """One model's eager training step back to back for `seconds`: step times and the card's state."""
    from dataclasses import replace

    import torch

    from mlsyscalc.bench.cases.sustained import CardSampler
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model

    spec = load_model(model_name)
    spec = replace(spec, num_layers=min(layers, spec.num_layers))
    model = build_model(spec, "bfloat16", "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, spec.vocab_size, (1, seq), device="cuda")

    def step():
        model(ids, ids).backward()  # the model's own fp32 cross-entropy
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    with CardSampler() as sampler:
        clock = lambda: time.perf_counter() - sampler.t0  # noqa: E731
        begin = clock()
        while clock() - begin < seconds:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = clock()
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append((t - begin, start.elapsed_time(end)))
        stop = clock()
        first = sampler.between(begin, begin + 1.0)
        steady = sampler.between(begin + (stop - begin) / 2, stop)
    early = [ms for t, ms in times[:5]]
    late = [ms for t, ms in times if t >= seconds / 2]
    return {"op": "train_step_steady", "model": model_name, "layers": spec.num_layers, "seq": seq,
            "first_steps_ms": statistics.median(early), "steady_ms": statistics.median(late),
            "steady_over_first": statistics.median(late) / statistics.median(early), "steps": len(times),
            "card_first_s": first, "card_steady": steady, "step_ms": [[round(t, 2), ms] for t, ms in times]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--steady", type=float, default=0.0, help="seconds of back-to-back training steps (0: none)")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=8192)
    args = ap.parse_args()

    from mlsyscalc.bench import harness

    harness.use_backend(False)
    env = dict(harness.env_metadata())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        for row in itertools.chain(_rows_ops("cuda"), _rows_gemms("cuda")):
            f.write(json.dumps({**row, "env": env, "measured_at": harness.now()}) + "\n")
            f.flush()
            print(row.get("op"), row.get("shape"), row.get("GBps", row.get("error")))
        if args.steady > 0:
            row = steady_step(args.model, args.layers, args.seq, args.steady)
            f.write(json.dumps({**row, "env": env, "measured_at": harness.now()}) + "\n")
            print(row["op"], row["first_steps_ms"], row["steady_ms"], row["steady_over_first"])


if __name__ == "__main__":
    main()
