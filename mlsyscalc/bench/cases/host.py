"""The host probe: what one eager step costs this machine's CPU, measured on the machine itself.

An eager PyTorch step is issued kernel by kernel from Python; for a small model or a small batch
the host, not the GPU, sets its time, and that cost differs between hosts (calc.roofline.host). The
probe times two eager steps of a TINY model built from the same spec by the same builder (the same
layers, kernels and module code; widths of 128, so every kernel runs a few microseconds and the GPU
waits on the host):

    s_per_kernel = eager training step (B1 S64) / kernels the roofline prices for that tiny step
    s_per_layer  = eager decode step (B1, 64 cached tokens) / decoder layers

and a generic launch rate (`launch_s`: host seconds per launch of a one-element in-place add,
issued back to back from Python) so that users can compare hosts. `mlsys bench model` runs it once
per process and prices its rows' host path with it; `mlsys bench host` reports it as rows of the
common schema. The assumption: the host's cost per priced kernel (per layer) of the tiny model is
that of the full-width one (docs/roofline.md, "Host path").
"""

from __future__ import annotations

import time
from dataclasses import replace

from ...calc.roofline.host import probe_costs
from ...calc.roofline.model import predict_model
from ..rows import Row

TINY_HIDDEN = 128  # 4 heads of 32
TINY_HEADS, TINY_HEAD_DIM = 4, 32
TINY_INTERMEDIATE = 256
TINY_VOCAB = 1024
TINY_TRAIN = (1, 64)  # batch, tokens per sequence of the probe's training step
TINY_DECODE = (1, 64)  # batch, cached tokens of the probe's decode step
LAUNCHES = 2000  # back-to-back launches of the launch probe
PROBE_REPS = 5


def tiny_spec(spec):
    """`spec` with every width small (same layers, norms, biases, positions, MoE/MLA structure)."""
    kv = TINY_HEADS if spec.num_kv_heads == spec.num_heads else 1 if spec.num_kv_heads == 1 else 2
    changes = dict(name=f"{spec.name}-tiny", hidden_size=TINY_HIDDEN, num_heads=TINY_HEADS, num_kv_heads=kv,
                   head_dim=TINY_HEAD_DIM, v_head_dim=TINY_HEAD_DIM, intermediate_size=TINY_INTERMEDIATE,
                   vocab_size=TINY_VOCAB, embed_proj_dim=TINY_HIDDEN // 2 if spec.embed_proj_dim else None)
    if spec.moe is not None:
        width = TINY_INTERMEDIATE // 8
        changes["moe"] = replace(spec.moe, expert_intermediate_size=width,
                                 shared_intermediate_size=width * spec.moe.num_shared_experts)
    if spec.mla is not None:
        half = TINY_HEAD_DIM // 2
        changes["mla"] = replace(spec.mla, q_lora_rank=TINY_HEAD_DIM if spec.mla.q_lora_rank else None,
                                 kv_lora_rank=TINY_HEAD_DIM, qk_nope_head_dim=half, qk_rope_head_dim=half,
                                 v_head_dim=half)
        changes["v_head_dim"] = half
    return replace(spec, **changes)


def tiny_cases():
    """The probe's two steps as bench model cases: an eager training step and an eager decode step."""
    from .model import ModelCase

    return (ModelCase("train", *TINY_TRAIN, graphs=False), ModelCase("decode", *TINY_DECODE, graphs=False))


def time_probe_steps(spec, device: str, reps: int = PROBE_REPS) -> tuple[float, float]:
    """(training step s, decode step s) of the tiny model, median of `reps` eager steps each."""
    from .model import _build, _free, _time_s, step_fn
    from ..torch_models import build_model

    times = []
    for case in tiny_cases():
        model = _build(build_model, spec, case, device)
        try:
            times.append(_time_s(step_fn(model, spec, case, device), reps, warmup=2))
        finally:
            del model
            _free()
    return times[0], times[1]


def launch_probe_s(device: str, launches: int = LAUNCHES) -> float:
    """Host seconds per launch of a one-element in-place add, issued back to back (the host's wall
    clock of the loop, before the GPU is waited for; after a warm-up of the same launches)."""
    import torch

    x = torch.zeros(1, device=device)
    for _ in range(2):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(launches):
            x.add_(1)
        issued = time.perf_counter() - start
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return issued / launches


def probe(spec, ceilings, device: str = "cuda", reps: int = PROBE_REPS, timer=None) -> dict:
    """The probe's fields for `spec` on this machine (module docstring). `timer(tiny, device, reps)` gives
    the two step times (default: time_probe_steps; tests pass fake timings)."""
    from .model import roofline_options

    tiny = tiny_spec(spec)
    train_case, _ = tiny_cases()
    kernels = predict_model(tiny, ceilings, roofline_options(train_case)).kernels
    train_s, decode_s = (timer or time_probe_steps)(tiny, device, reps)
    costs = probe_costs(train_s, kernels, decode_s, tiny.num_layers, source=f"host probe ({tiny.name}, {device})")
    return {"host_s_per_kernel": costs.s_per_kernel, "host_s_per_layer": costs.s_per_layer,
            "host_launch_s": launch_probe_s(device) if timer is None else None, "host_probe_model": tiny.name,
            "host_probe_train_s": train_s, "host_probe_train_kernels": kernels, "host_probe_decode_s": decode_s,
            "host_probe_layers": tiny.num_layers}


_PROBED: dict[tuple[str, str], dict] = {}


def probe_once(spec, ceilings, device: str) -> dict:
    """probe(), measured once per process for each (model, device); a probe that fails gives its error
    (`host_probe_error`), and the rows keep the default host costs."""
    key = (spec.name, device)
    if key not in _PROBED:
        try:
            _PROBED[key] = probe(spec, ceilings, device)
        except Exception as exc:  # noqa: BLE001 - the rows go on without the probe
            text = str(exc).splitlines()[0][:300] if str(exc) else ""
            _PROBED[key] = {"host_probe_error": f"{type(exc).__name__}: {text}"}
    return _PROBED[key]


def host_rows(spec, fields: dict, env: dict, measured_at: str) -> list[Row]:
    """`mlsys bench host`'s rows (common schema): the probe's two steps and the launch loop, each with
    its time and the cost per unit it gives (extra.host_s_per_kernel / host_s_per_layer / launch_s)."""
    tiny, variant = fields["host_probe_model"], f"{spec.name} tiny"
    train = Row("host.train", "eager", f"B{TINY_TRAIN[0]} S{TINY_TRAIN[1]}", "bf16", variant, ok=True,
                median_ms=fields["host_probe_train_s"] * 1e3,
                extra={"model": tiny, "kernels": fields["host_probe_train_kernels"],
                       "host_s_per_kernel": fields["host_s_per_kernel"]})
    decode = Row("host.decode", "eager", f"B{TINY_DECODE[0]} ctx{TINY_DECODE[1]}", "bf16", variant, ok=True,
                 median_ms=fields["host_probe_decode_s"] * 1e3,
                 extra={"model": tiny, "layers": fields["host_probe_layers"],
                        "host_s_per_layer": fields["host_s_per_layer"]})
    rows = [train, decode]
    if fields.get("host_launch_s"):
        rows.append(Row("host.launch", "eager", f"{LAUNCHES} launches", "fp32", "add_ 1 element", ok=True,
                        median_ms=fields["host_launch_s"] * LAUNCHES * 1e3,
                        extra={"launches": LAUNCHES, "host_launch_s": fields["host_launch_s"]}))
    for row in rows:
        row.env, row.measured_at = dict(env), measured_at
    return [r.finish() for r in rows]
