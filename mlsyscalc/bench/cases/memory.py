"""Check `mlsys memory train|infer` against torch.cuda.max_memory_allocated on a real GPU.

    python -m mlsyscalc.bench.cases.memory --out DIR   (`scripts/device.sh memory` runs it)

For each scaled-down model (llama-style MHA, GQA with a large vocabulary, Mixtral-style MoE,
GPT-2-XL shapes) it builds the model with `bench.torch_models`, runs two bf16 mixed-precision
AdamW training steps (fp32 master weights, momentum and variance; gradients kept between
steps like Megatron-LM's buffers) and measures the second; then a KV-cache prefill. Weights,
gradients and optimizer states are measured by tensor sizes; activations as the memory
allocated after the forward minus before; the peak by max_memory_allocated. One JSON row per
case is appended to DIR/rows.jsonl as soon as it is measured; `mlsys bench report DIR --out reports`
turns them into reports/memory/validation.md. Torch is imported inside functions only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ...calc.memory.inference import InferOptions, infer_memory
from ...calc.memory.training import TrainOptions, train_memory
from ...readers.records import read_memory_records
from ...specs.lookup import load_model
from ..rows import Row

# Scaled-down configs (HF keys) of public models: ~0.5-1.6B parameters, fit one 80 GB card.
MODELS = {
    "llama-1b (MHA)": ("llama2-7b", {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
                                      "num_key_value_heads": 16, "intermediate_size": 5632}),
    "llama3-1.5b (GQA 32/8, vocab 128k)": ("llama3-8b", {"hidden_size": 2048, "num_hidden_layers": 16,
                                                          "num_attention_heads": 32, "num_key_value_heads": 8,
                                                          "intermediate_size": 8192}),
    "mixtral-0.9b (MoE 8x top-2)": ("mixtral-8x7b", {"hidden_size": 1024, "num_hidden_layers": 8,
                                                     "num_attention_heads": 16, "num_key_value_heads": 4,
                                                     "intermediate_size": 3584}),
    "gpt2-xl (1.6B, LayerNorm, GeLU)": ("gpt2-xl", {}),
}
# (model, batch, seq, activation checkpointing, flash attention)
TRAIN_CASES = [
    ("llama-1b (MHA)", 4, 2048, False, True), ("llama-1b (MHA)", 8, 2048, False, True),
    ("llama-1b (MHA)", 8, 2048, True, True), ("llama-1b (MHA)", 2, 1024, False, False),
    ("llama3-1.5b (GQA 32/8, vocab 128k)", 4, 2048, False, True),
    ("llama3-1.5b (GQA 32/8, vocab 128k)", 4, 4096, True, True),
    ("mixtral-0.9b (MoE 8x top-2)", 4, 2048, False, True), ("mixtral-0.9b (MoE 8x top-2)", 8, 2048, True, True),
    ("gpt2-xl (1.6B, LayerNorm, GeLU)", 4, 1024, False, True), ("gpt2-xl (1.6B, LayerNorm, GeLU)", 2, 1024, False, False),
]
# (model, batch, context): one-shot prefill into a preallocated KV cache
INFER_CASES = [
    ("llama-1b (MHA)", 8, 4096), ("llama3-1.5b (GQA 32/8, vocab 128k)", 16, 8192),
    ("mixtral-0.9b (MoE 8x top-2)", 8, 4096), ("gpt2-xl (1.6B, LayerNorm, GeLU)", 16, 1024),
]


def spec_for(label: str):
    base, overrides = MODELS[label]
    return replace(load_model(base, overrides or None), name=label)


class MixedAdamW:
    """bf16 parameters and gradients; fp32 master weights, momentum and variance (16 B/param).
    Updates in 16M-element chunks so the step's temporaries stay small."""

    CHUNK = 1 << 24

    def __init__(self, params, lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        import torch

        unique = {p.data_ptr(): p for p in params if p.requires_grad}
        self.params = list(unique.values())
        self.master = [p.detach().float() for p in self.params]
        self.m = [torch.zeros_like(w) for w in self.master]
        self.v = [torch.zeros_like(w) for w in self.master]
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay

    def state_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for group in (self.master, self.m, self.v) for t in group)

    def step(self) -> None:
        b1, b2 = self.betas
        for p, w, m, v in zip(self.params, self.master, self.m, self.v):
            flat = [t.view(-1) for t in (p.grad, w, m, v, p.data)]
            for i in range(0, flat[0].numel(), self.CHUNK):
                g, wc, mc, vc, pc = (t[i:i + self.CHUNK] for t in flat)
                g = g.float()
                mc.lerp_(g, 1 - b1)
                vc.mul_(b2).addcmul_(g, g, value=1 - b2)
                wc.mul_(1 - self.lr * self.wd).addcdiv_(mc, vc.sqrt().add_(self.eps), value=-self.lr)
                pc.copy_(wc)

    def zero_grad(self) -> None:
        for p in self.params:  # keep the buffers (Megatron-LM / DeepSpeed style)
            p.grad.zero_()


def _tensor_bytes(tensors) -> int:
    seen = {t.data_ptr(): t.numel() * t.element_size() for t in tensors if t is not None}
    return sum(seen.values())


def measure_train(spec, batch, seq, checkpoint, flash, device="cuda") -> dict:
    import torch

    from ..torch_models import build_model

    model = build_model(spec, "bfloat16", device, flash=flash, checkpoint=checkpoint)
    opt = MixedAdamW(model.parameters())
    ids = torch.randint(0, spec.vocab_size, (batch, seq), device=device)
    targets = torch.randint(0, spec.vocab_size, (batch, seq), device=device)

    def step(marks=None):
        loss = model(ids, targets)  # noqa: F821 - deleted after the last call
        if marks is not None:
            marks["after_forward"] = _allocated(device)
        loss.backward()
        opt.step()  # noqa: F821 - deleted after the last call
        opt.zero_grad()  # noqa: F821 - deleted after the last call

    step()  # allocates gradients and optimizer states
    _sync(device)
    _reset_peak(device)
    marks = {"before": _allocated(device)}
    step(marks)
    _sync(device)
    row = {
        "weights_bytes": _tensor_bytes(model.parameters()),
        "gradients_bytes": _tensor_bytes(p.grad for p in model.parameters()),
        "optimizer_bytes": opt.state_bytes(),
        "forward_saved_bytes": marks["after_forward"] - marks["before"],
        "peak_bytes": _peak(device), "baseline_bytes": marks["before"],
    }
    del model, opt
    return row


def measure_infer(spec, batch, context, device="cuda") -> dict:
    import torch

    from ..torch_models import build_model

    model = build_model(spec, "bfloat16", device, flash=True)
    shape = (batch, context, spec.num_kv_heads)
    caches = [(torch.empty(*shape, spec.head_dim, device=device, dtype=torch.bfloat16),
               torch.empty(*shape, spec.v_head_dim, device=device, dtype=torch.bfloat16)) for _ in range(spec.num_layers)]
    ids = torch.randint(0, spec.vocab_size, (batch, context), device=device)
    _sync(device)
    _reset_peak(device)
    before = _allocated(device)
    model.prefill(ids, caches)
    _sync(device)
    row = {"weights_bytes": _tensor_bytes(model.parameters()), "kv_cache_bytes": _tensor_bytes(t for c in caches for t in c),
           "peak_bytes": _peak(device), "baseline_bytes": before}
    del model, caches
    return row


def predict_train(spec, batch, seq, checkpoint, flash) -> dict:
    r = train_memory(spec, TrainOptions(batch=batch, seq=seq, recompute="full" if checkpoint else "none", flash=flash))
    d = r.peak_stage.detail
    logprobs = batch * seq * spec.vocab_size * 4  # fp32 log-softmax output saved by the loss
    return {**{f"{k}_bytes": v for k, v in r.breakdown.items()}, "peak_bytes": r.total,
            "forward_saved_bytes": d["activations_layers"] + d["activations_embedding_head"] + logprobs}


def predict_infer(spec, batch, context) -> dict:
    r = infer_memory(spec, InferOptions(batch=batch, context=context, prefill_chunk=batch * context))
    return {**{f"{k}_bytes": v for k, v in r.breakdown.items()}, "peak_bytes": r.total}


def environment() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    return {"gpu": props.name if props else "cpu", "gpu_memory_bytes": props.total_memory if props else 0,
            "torch": torch.__version__, "cuda": torch.version.cuda, "commit": os.environ.get("MLSYS_COMMIT", "unknown"),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_all(out: Path, device="cuda", train_cases=TRAIN_CASES, infer_cases=INFER_CASES) -> list[dict]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done = read_memory_records(rows_path) if rows_path.exists() else []
    rows = [r for r in done if "error" not in r]  # a rerun resumes: measured cases are kept
    env = environment()
    jobs = [("train", c) for c in train_cases] + [("infer", c) for c in infer_cases]
    for kind, case in jobs:
        if any(r["kind"] == kind and r["model"] == case[0] and r["case"] == list(case[1:]) for r in rows):
            continue
        row = {"kind": kind, "model": case[0], "case": list(case[1:]), **env}
        try:
            row.update(_run_case(kind, spec_for(case[0]), case[1:], device))
        except Exception as exc:  # noqa: BLE001 - record and go on to the next case
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        if device == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
        with open(rows_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row.get(k) for k in ("kind", "model", "case", "error")}), flush=True)
    return rows


def _run_case(kind, spec, case, device) -> dict:
    """Predict and measure one case; flash attention runs on SDPA's FLASH backend only (falls
    back to SDPA's default choice, recorded in `sdpa`, if that backend refuses the shapes)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    # the case tuple fills the positional parameters of the train or the infer pair
    predict: Callable[..., dict] = predict_train if kind == "train" else predict_infer
    measure: Callable[..., dict] = measure_train if kind == "train" else measure_infer
    result: dict[str, Any] = {"predicted": predict(spec, *case)}
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            result["measured"], result["sdpa"] = measure(spec, *case, device=device), "flash"
    except RuntimeError as exc:
        if "out of memory" in str(exc):
            raise
        torch.cuda.empty_cache() if device == "cuda" else None
        result["measured"], result["sdpa"] = measure(spec, *case, device=device), f"default ({str(exc)[:80]})"
    return result


def _allocated(device):
    import torch

    return torch.cuda.memory_allocated() if device == "cuda" else 0


def _peak(device):
    import torch

    return torch.cuda.max_memory_allocated() if device == "cuda" else 0


def _reset_peak(device):
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _sync(device):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def to_row(record: dict) -> Row:
    """One memory case in the shared row shape: kernel `memory_<kind>`, bytes = the measured peak,
    the record itself in `extra` (so `from_row` gives it back)."""
    measured = record.get("measured") or {}
    env = {"gpu": record.get("gpu"), "torch": record.get("torch"), "cuda": record.get("cuda"),
           "git_commit": record.get("commit")}
    return Row(kernel=f"memory_{record['kind']}", baseline="mlsys memory", shape=str(record["model"]),
               dtype="bf16", variant="x".join(str(v) for v in record["case"]), ok="error" not in record,
               bytes=measured.get("peak_bytes"), error=record.get("error"), measured_at=record.get("time"),
               env={k: v for k, v in env.items() if v is not None}, extra=dict(record))


def from_row(row: Row) -> dict:
    return dict(row.extra)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    run_all(Path(args.out))
    # the page is the report layer's: `mlsys bench report OUT --out reports` writes validation.md
    print(f"rows in {Path(args.out) / 'rows.jsonl'}; page: mlsys bench report <OUT> --out reports", file=sys.stderr)


if __name__ == "__main__":
    main()
