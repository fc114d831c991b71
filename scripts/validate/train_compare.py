"""Rows of scripts/train_measure.py against `mlsys train`: measured and predicted step time and memory per GPU.

    python scripts/validate/train_compare.py ROWS.jsonl [--cluster hgx-h200] [--calibration ceilings.json]
                                    [--overlap DIMS] [--comm-sms N] [--framework megatron|torch] [--host-probe]
                                    [--out FILE]

Each row's layout becomes `mlsys train` flags (ddp: --zero 0; fsdp: --zero 3 over dp; tp: --tp --no-sp; pp
cases: --pp, and --vp 2 for the interleaved schedule, --schedule gpipe for GPipe: the bubble of 1F1B, all
micro-batches in flight); the model is the row's HF config (a built-in llama config with the row's overrides). Memory
compares the largest rank's torch.cuda.max_memory_allocated with `memory_bytes_per_gpu`. The measured
forward+backward time is set against the predicted compute + bubble + exposed communication, the measured
optimizer time against the predicted optimizer step. --host-probe prices each row with `--framework torch
--host-costs` of its own host probe (the row's host_probe.costs, measured in the same process just before the
case: scripts/train_host_probe.py); a row without one is reported as such.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # validate/, scripts/

from train_published import Runner, builtin_config, cli_runner  # noqa: E402


def config_for(model: dict, folder: Path) -> str:
    """The built-in HF config of model['base'] with model['overrides'] applied, written to folder."""
    data = builtin_config(model["base"], model["overrides"])
    path = folder / "model.json"
    path.write_text(json.dumps(data))
    return str(path)


def train_args(row: dict, model: str, cluster: str, calibration: str | None = None,
               overlap: str | None = None, comm_sms: int | None = None, framework: str | None = None,
               host_probe: bool = False) -> list[str]:
    args = ["train", model, "--gpus", str(row["gpus"]), "--cluster", cluster, "--seq", str(row["seq"]),
            "--global-batch", str(row["global_batch"]), "--micro-batch", str(row["micro_batch"]),
            "--dp", str(row["dp"]), "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--no-sp",
            "--recompute", "none", "--dtype", "bf16"]
    if row["vp"] > 1:
        args += ["--vp", str(row["vp"])]
    if row["case"] == "pp-gpipe":
        args += ["--schedule", "gpipe"]
    if row["case"] == "tp-pp":
        args += ["--no-vocab-parallel"]  # scripts/train_measure.py leaves the embedding and head whole in tp-pp
    if row["case"] in ("fsdp", "fsdp-tp"):
        args += ["--zero", "3"]  # FSDP2 full sharding = ZeRO-3
    if row["case"] == "fsdp-zero2":
        args += ["--zero", "2"]  # FSDP2 without resharding after the forward
    if row.get("sdpa_backend") == "flash":
        args += ["--attention", "flash2"]  # SDPA's FLASH backend is FlashAttention-2
    args += ["--calibration", calibration] if calibration else []
    args += ["--comm-sms", str(comm_sms)] if comm_sms is not None else []
    args += ["--framework", framework] if framework else []
    if host_probe:
        if "host_probe" not in row:
            raise ValueError("no host probe in this row")
        args += [] if framework else ["--framework", "torch"]
        args += ["--host-costs", json.dumps(row["host_probe"]["costs"])]
    return args + (["--overlap", overlap] if overlap else [])


def compare(rows: list[dict], cluster: str, runner: Runner, calibration: str | None = None,
            overlap: str | None = None, comm_sms: int | None = None, framework: str | None = None,
            host_probe: bool = False) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for row in rows:
            # SDPA's backend when not torch's choice (rows from before the flag say nothing) and a sequence not 2048
            notes = [f"SDPA {row['sdpa_backend']}"] if row.get("sdpa_backend", "default") != "default" else []
            notes += [f"S{row['seq']}"] if row["seq"] != 2048 else []
            entry = {"case": row["case"] + (f" ({', '.join(notes)})" if notes else ""),
                     "gpus": row["gpus"], "seqs_per_gpu": row["global_batch"] / row["gpus"],
                     "measured_step_s": row["step_time_s"],
                     "measured_bytes": max(row["peak_bytes_per_rank"])}
            try:
                result = runner(train_args(row, config_for(row["model"], Path(folder)), cluster, calibration, overlap,
                                           comm_sms, framework, host_probe))
            except Exception as exc:
                out.append(entry | {"failure": str(exc)})
                continue
            entry |= {"predicted_step_s": result["step_time_s"], "predicted_bytes": result["memory_bytes_per_gpu"],
                      "breakdown": result.get("breakdown", {}), "host_work": result.get("host_work", {}),
                      "host_costs": result.get("host_costs", {})}
            if "fwd_bwd_s" in row:
                opt = entry["breakdown"].get("optimizer_s", 0.0)
                entry |= {"measured_fwd_bwd_s": row["fwd_bwd_s"], "measured_optimizer_s": row["optimizer_s"],
                          "predicted_fwd_bwd_s": entry["predicted_step_s"] - opt, "predicted_optimizer_s": opt}
            entry["step_error"] = entry["predicted_step_s"] / entry["measured_step_s"] - 1
            if entry["measured_bytes"]:
                entry["memory_error"] = entry["predicted_bytes"] / entry["measured_bytes"] - 1
            out.append(entry)
    return out


def _ms(e: dict, key: str) -> str:
    return f"{e[key] * 1e3:.1f}" if key in e else "-"


def compare_table(rows_path: Path, cluster: str, runner: Runner | None = None, calibration: str | None = None,
                  overlap: str | None = None, comm_sms: int | None = None, framework: str | None = None,
                  host_probe: bool = False) -> str:
    from mlsyscalc.report.markdown import markdown_table

    rows = [json.loads(line) for line in Path(rows_path).read_text().splitlines() if line.strip()]
    entries = compare(rows, cluster, runner or cli_runner(), calibration, overlap, comm_sms, framework, host_probe)
    pct = lambda e, k: f"{100 * e[k]:+.1f}%" if k in e else "-"  # noqa: E731
    gib = 2**30
    table = [[e["case"], e["gpus"], f"{e['seqs_per_gpu']:g}", _ms(e, "measured_step_s"),
              _ms(e, "predicted_step_s") if "predicted_step_s" in e else e.get("failure", "-"),
              pct(e, "step_error"), _ms(e, "measured_fwd_bwd_s"), _ms(e, "predicted_fwd_bwd_s"),
              _ms(e, "measured_optimizer_s"), _ms(e, "predicted_optimizer_s"), f"{e['measured_bytes'] / gib:.2f}",
              f"{e['predicted_bytes'] / gib:.2f}" if "predicted_bytes" in e else "-", pct(e, "memory_error")]
             for e in entries]
    env = rows[0].get("env", {}) if rows else {}
    kernels = f"kernel ceilings `{calibration}`" if calibration else "datasheet kernel ceilings"
    head = [f"## {env.get('device', '?')}, torch {env.get('torch', '?')}, NCCL {env.get('nccl', '?')}, "
            f"commit {str(env.get('commit', '?'))[:7]}; modelled on `{cluster}`, {kernels}"
            + (f", `--overlap {overlap}`" if overlap else "")
            + (f", `--comm-sms {comm_sms}`" if comm_sms is not None else "")
            + (f", `--framework {framework}`" if framework else "")
            + (", each row's own host probe (`--host-costs`)" if host_probe else ""), "",
            "error = predicted / measured - 1. Measured: median step after warm-up (slowest rank), split into "
            "forward+backward (f+b, with the communication it waits for) and the optimizer (opt); "
            "max_memory_allocated of the largest rank (scripts/train_measure.py). Predicted f+b = step - optimizer.", ""]
    probes = probe_table(rows) if host_probe else []
    return "\n".join(head + markdown_table(
        ["case", "GPUs", "seqs/GPU", "step meas (ms)", "step pred (ms)", "step err", "f+b meas", "f+b pred", "opt meas",
         "opt pred", "mem meas (GiB)", "mem pred (GiB)", "mem err"], table) + [""] + probes)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def probe_table(rows: list[dict]) -> list[str]:
    """Each row's probed costs (us; fsdp_layer ms), and those of the probe after the case where there is one."""
    from mlsyscalc.report.markdown import markdown_table

    scale = {"op_s": 1e6, "dtensor_matmul_s": 1e6, "fsdp_layer_s": 1e3, "dtensor_param_s": 1e6}

    def cells(probe: dict | None) -> list[str]:
        costs = (probe or {}).get("costs", {})
        return [f"{costs[k] * f:.1f}" if k in costs else "-" for k, f in scale.items()]
    table = [[r["case"], r["gpus"], f"{r['global_batch'] / r['gpus']:g}", *cells(r.get("host_probe")),
              *cells(r.get("host_probe_after")), _seconds(r.get("host_probe", {}).get("wall_s"))]
             for r in rows]
    return ["Host probe of each row (scripts/train_host_probe.py): before the case | after it (--probe-after).", ""] + \
        markdown_table(["case", "GPUs", "seqs/GPU", "op us", "DTensor matmul us", "FSDP2 layer ms", "DTensor param us",
                        "after: op us", "matmul us", "layer ms", "param us", "probe s"], table) + [""]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path)
    ap.add_argument("--cluster", default="hgx-h200")
    ap.add_argument("--calibration", help="kernel ceilings of `mlsys bench ceilings` (mlsys train --calibration)")
    ap.add_argument("--overlap", help="mlsys train --overlap (default: its own)")
    ap.add_argument("--comm-sms", type=int, help="mlsys train --comm-sms (default: its own)")
    ap.add_argument("--framework", help="mlsys train --framework (default: its own)")
    ap.add_argument("--host-probe", action="store_true",
                    help="price each row with its own host probe's costs (--framework torch --host-costs)")
    ap.add_argument("--out", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    page = compare_table(args.rows, args.cluster, calibration=args.calibration, overlap=args.overlap,
                         comm_sms=args.comm_sms, framework=args.framework, host_probe=args.host_probe)
    print(page)
    if args.out:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
