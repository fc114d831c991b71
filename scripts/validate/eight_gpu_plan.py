"""What the 8-GPU run measures (issue 42), in one place: the device script runs it, the predictions price it,
the scoring checks every measured row against it.

    python3 scripts/validate/eight_gpu_plan.py shell     # bash assignments scripts/device_8gpu.sh evals

Collectives: `mlsys bench comm` with every collective, 1 KiB .. 1 GiB by factors of 2, eager and replayed from
CUDA graphs, on 8 GPUs of the host first (the held-out count), then on 2 and 4 GPUs of the same host.
Training: scripts/train_measure.py on the 8 GPUs, one process a case: TP 8, FSDP2 8, TP 4 x PP 2 (`tp-pp`), TP 2 x
FSDP2 4 (`fsdp-tp`), llama2-7b as published, 2 sequences of 2048 tokens of work a GPU, bf16 weights with fp32
master weights and AdamW moments, no recomputation, SDPA as torch chooses (the layouts `mlsys train` prices from
the same rows: scripts/validate/train_compare.py `train_args`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

import train_measure  # noqa: E402

GPUS = 8  # the held-out count: swept first
FIT_GPUS = (2, 4)  # then these GPU counts of the same host, which a fit on fewer GPUs may use
COMM_MIN_SIZE, COMM_MAX_SIZE = 2**10, 2**30  # 1 KiB .. 1 GiB, by factors of 2
GOAL_MIN_SIZE = 2**20  # the goals count collectives of at least 1 MiB
TRAIN_CASES = ("tp", "fsdp", "tp-pp", "fsdp-tp")
TRAIN_MODEL = "llama2-7b"  # a key of train_measure.MODELS
SEQ, SEQS_PER_GPU = 2048, 2
WARMUP, STEPS = 3, 8
CLUSTER, FRAMEWORK = "hgx-h200", "torch"  # what `mlsys train` prices the rows on
CARD = "NVIDIA H200"  # the card the predictions are for (torch.cuda.get_device_name)
LAYOUT_KEYS = ("gpus", "dp", "tp", "pp", "vp", "micro_batch", "micro_batches", "global_batch")


def train_flags() -> list[str]:
    """scripts/train_measure.py's flags for every case (a later flag of the same name overrides one of these)."""
    return ["--model", TRAIN_MODEL, "--seq", str(SEQ), "--seqs-per-gpu", str(SEQS_PER_GPU), "--warmup", str(WARMUP),
            "--steps", str(STEPS), "--no-host-probe"]


def comm_flags() -> list[str]:
    """`mlsys bench comm` flags of every sweep (each adds --nproc and --out)."""
    return ["--min-size", f"{COMM_MIN_SIZE // 2**10}KiB", "--max-size", f"{COMM_MAX_SIZE // 2**30}GiB", "--graph"]


def comm_sizes() -> list[int]:
    """Every message size of the sweep, bytes (at 8 ranks each is already a whole number of float32 per rank)."""
    sizes, size = [], COMM_MIN_SIZE
    while size <= COMM_MAX_SIZE:
        sizes.append(size)
        size *= 2
    return sizes


def planned_row(case: str) -> dict[str, Any]:
    """The row scripts/train_measure.py writes for a case of this run, less what it measures."""
    base, overrides = train_measure.MODELS[TRAIN_MODEL]
    lay = train_measure.layout(case, GPUS, SEQS_PER_GPU)
    return {"case": case, "model": {"base": base, "overrides": overrides}, "gpus": GPUS, **lay, "seq": SEQ,
            "global_batch": lay["micro_batch"] * lay["micro_batches"] * lay["dp"], "sdpa_backend": "default"}


def layout_of(row: dict[str, Any]) -> dict[str, Any]:
    """The parallel layout of a row (planned or measured): what must agree before a row is scored."""
    return {k: row.get(k) for k in LAYOUT_KEYS}


def differences(row: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """Where a measured row differs from the planned one in what `mlsys train` priced; [] where it does not."""
    out = [f"{k} {row.get(k)} (planned {v})" for k, v in layout_of(planned).items() if row.get(k) != v]
    out += [f"seq {row.get('seq')} (planned {planned['seq']})"] if row.get("seq") != planned["seq"] else []
    if row.get("model") != planned["model"]:
        out.append(f"model {model_name(row.get('model') or {})} (planned {model_name(planned['model'])})")
    if row.get("sdpa_backend", "default") != planned["sdpa_backend"]:
        out.append(f"SDPA backend {row.get('sdpa_backend')} (planned {planned['sdpa_backend']})")
    return out


def model_name(model: dict[str, Any]) -> str:
    """llama2-7b, or llama2-7b with hidden_size=64, ... (a row's model: a built-in and its overrides)."""
    changes = ", ".join(f"{k}={v}" for k, v in (model.get("overrides") or {}).items())
    return f"{model.get('base', '?')}" + (f" with {changes}" if changes else "")


def shell() -> str:
    """Bash assignments for scripts/device_8gpu.sh."""
    arrays = {"TRAIN_FLAGS": train_flags(), "COMM_FLAGS": comm_flags()}
    words = {"TRAIN_CASES": TRAIN_CASES, "FIT_GPUS": map(str, FIT_GPUS)}
    return "\n".join([f"{k}=({' '.join(map(shlex.quote, v))})" for k, v in arrays.items()]
                     + [f"{k}={shlex.quote(' '.join(v))}" for k, v in words.items()] + [f"GPUS={GPUS}"])


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args != ["shell"]:
        sys.stderr.write("usage: python3 scripts/validate/eight_gpu_plan.py shell\n")
        raise SystemExit(2)
    print(shell())


if __name__ == "__main__":
    main()
