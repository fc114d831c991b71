"""The host probe of scripts/train_measure.py: before each case, in the same process, a few training steps of a
tiny model (every width 128, the case model's layers; calc's bench host probe model) in the case's parallel
layout, whose kernels are so short that the step time is the host's. From them calc.train.probe solves the
torch costs the case's layout uses (op_s, dtensor_matmul_s, fsdp_layer_s, dtensor_param_s, seconds) with
calc.train.host's own work counts for the tiny model; the row carries them as `host_probe`:

    python scripts/validate/train_compare.py ROWS.jsonl --host-probe     # each row priced with its own probe's costs

Steps per case (each adds one cost; calc.train.probe):
  single, pp-*     plain one-GPU step on every rank                                      op_s
  ddp              the DDP step                                                          op_s
  tp               plain step, then DTensor TP over all ranks                            op_s, dtensor_matmul_s
  fsdp             plain step, then FSDP2 over all ranks                                 op_s, fsdp_layer_s
  fsdp-zero2       the same, FSDP2 without resharding after the forward                   op_s, fsdp_layer_s
  fsdp-tp          plain step, TP over rank pairs, then FSDP2 x TP                       op_s, dtensor_matmul_s, fsdp_layer_s
  tp-pp            plain step, then TP over the case's tp group (vocabulary whole)       op_s, dtensor_matmul_s
dtensor_param_s = the last DTensor step's optimizer time / its parameter tensors.
"""

from __future__ import annotations

import time
from dataclasses import asdict

PROBE_SEQ = 128  # tokens per sequence of the probe's steps
PROBE_WARMUP, PROBE_STEPS = 2, 5
FSDP_CASES = {"fsdp": 3, "fsdp-tp": 3, "fsdp-zero2": 2}  # case -> the ZeRO stage its FSDP2 runs


def probe_plan(case: str, lay: dict) -> list[tuple[str, dict]]:
    """(build_case name, layout) of each probe step of a case (module docstring); the case's micro-batch size,
    one micro-batch a step."""
    one = {"dp": 1, "tp": 1, "pp": 1, "vp": 1, "micro_batch": lay["micro_batch"], "micro_batches": 1}
    if case == "ddp":
        return [("ddp", lay)]
    steps = [("single", one)]
    if case in ("tp", "fsdp", "fsdp-zero2"):
        steps.append((case, lay))
    if case in ("fsdp-tp", "tp-pp"):
        steps.append(("tp", one | {"tp": lay["tp"]}))  # TP over the case's tp group
    if case == "fsdp-tp":
        steps.append((case, lay))
    return steps


def tiny_work(spec, plan: dict, seq: int, zero: int):
    """calc.train.host's work counts (StageWork) of `spec` in the plan's layout (`mlsys train`'s host_work)."""
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.train.step import train_step
    from mlsyscalc.calc.train.options import TrainStepOptions

    dp, tp, pp = plan["dp"], plan["tp"], plan["pp"]
    opts = TrainStepOptions(gpus=dp * tp * pp, seq=seq, global_batch=plan["micro_batch"] * plan["micro_batches"] * dp,
                            micro_batch=plan["micro_batch"], tp=tp, pp=pp, dp=dp, vp=plan["vp"], sp=False, zero=zero,
                            recompute="none", framework="torch")
    return train_step(spec, load_ceilings("H200", None), "hgx-h200", opts).host_work


def host_probe(measure, case: str, spec, lay: dict, device, *, seq: int = PROBE_SEQ, warmup: int = PROBE_WARMUP,
               steps: int = PROBE_STEPS) -> dict:
    """The `host_probe` object of a case's row: the solved costs, the steps they come from (slowest rank's
    medians), the tiny model. `measure(name, spec, layout, seq, warmup, steps, device, vocab=...)` is
    train_measure's (each rank's medians)."""
    import torch.distributed as dist

    from mlsyscalc.bench.cases.host import tiny_spec
    from mlsyscalc.calc.train.probe import ProbeStep, solve_probe

    start, world = time.perf_counter(), dist.get_world_size()
    tiny = tiny_spec(spec)
    timed, rows = [], []
    for name, plan in probe_plan(case, lay):
        mine = measure(name, tiny, plan, seq, warmup, steps, device, vocab=case != "tp-pp")
        every: list = [None] * world
        dist.all_gather_object(every, mine)
        fb, opt = (max(r[k] for r in every) for k in ("fwd_bwd_s", "optimizer_s"))
        zero = FSDP_CASES.get(name, 0)
        work = tiny_work(tiny, plan, seq, zero)
        timed.append(ProbeStep(work, plan["micro_batches"], plan["tp"], zero, fb, opt))
        rows.append({"step": name, **plan, "zero": zero, "fwd_bwd_s": fb, "optimizer_s": opt, "work": asdict(work)})
    solved = solve_probe(timed)
    return {"costs": dict(solved.costs), "clamped": list(solved.clamped), "steps": rows,
            "model": {"hidden_size": tiny.hidden_size, "num_layers": tiny.num_layers,
                      "intermediate_size": tiny.intermediate_size, "vocab_size": tiny.vocab_size},
            "seq": seq, "warmup": warmup, "timed_steps": steps, "wall_s": time.perf_counter() - start}
