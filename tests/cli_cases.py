"""One invocation of every calculator command, shared by the rendering tests (80 columns, CSV)."""

from __future__ import annotations

from pathlib import Path

COMMANDS = [
    ["models"],
    ["models", "show", "deepseek-v3"],
    ["gpus"],
    ["params", "mixtral-8x7b"],
    ["flops", "llama2-7b", "--seq", "4096", "--causal"],
    ["flops", "llama3-8b", "--phase", "decode", "--context", "8192", "--batch", "32"],
    ["memory", "train", "llama2-7b", "--pp", "2", "--gpu", "h100"],
    ["memory", "infer", "llama3-8b", "--dtype", "int4", "--gpu", "h100", "--max", "batch"],
    ["roofline", "op", "matmul", "--m", "8192"],
    ["roofline", "op", "attention", "--causal", "--kv-heads", "8"],
    ["roofline", "op", "elementwise", "--inputs", "2"],
    ["roofline", "llama2-7b"],
    ["roofline", "llama3-8b", "--phase", "decode", "--context", "4096", "--tp", "2"],
    ["roofline", "llama2-7b", "--phase", "train", "--dp", "4", "--zero", "1"],
    ["roofline", "llama2-7b", "--phase", "decode", "--context", "1024", "--sweep", "batch=1,8,64"],
    ["scaling", "optimal", "--compute", "5.76e23"],
    ["scaling", "loss", "--params", "70B", "--tokens", "1.4T"],
    ["scaling", "budget", "--compute", "5.76e23", "--gpu", "h100", "--gpus", "1024", "--price-per-gpu-hour", "2.5"],
    ["scaling", "table", "--law", "all"],
    ["scaling", "fit", "{runs_csv}", "--starts", "8", "--bootstrap", "4"],
    ["comm", "all-reduce", "--size", "256MiB", "--nodes", "2", "--gpus", "16"],
    ["comm", "step", "mixtral-8x7b", "--dp", "8", "--ep", "8", "--tp", "2", "--pp", "2"],
    ["comm", "clusters"],
    ["compare", "llama3-8b", "--gpus", "h100,b200,gb200-nvl72", "--price-per-gpu-hour", "h100=2.5,b200=4"],
    ["compare", "llama3-8b", "--task", "memory", "--gpus", "h20,l20,mi355x", "--dtype", "nvfp4"],
]


def write_runs(path: Path) -> Path:
    """A small IsoFLOP-style CSV whose losses follow Chinchilla's approach-3 law exactly."""
    lines = ["params,tokens,loss"]
    for n in (1e8, 3e8, 1e9, 3e9):
        for d in (2e9, 6e9, 2e10, 6e10):
            lines.append(f"{n:g},{d:g},{1.69 + 406.4 / n ** 0.34 + 410.7 / d ** 0.28:.6f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def invocations(tmp_path: Path) -> list[list[str]]:
    runs = str(write_runs(tmp_path / "runs.csv"))
    return [[runs if arg == "{runs_csv}" else arg for arg in args] for args in COMMANDS]
