"""scripts/train_host_fit.py: the framework's host costs solved from measured rows, against hand arithmetic."""

from __future__ import annotations

import pytest

from .conftest import load_script

fit = load_script("train_host_fit")
MODEL = {"base": "llama2-7b", "overrides": {"num_hidden_layers": 4}}


def _row(case: str, **kw) -> dict:
    return {"case": case, "model": MODEL, "gpus": 2, "dp": 1, "tp": 1, "pp": 1, "vp": 1, "micro_batch": 1,
            "micro_batches": 1, "seq": 128, "global_batch": 1} | kw


def _runner(args):
    """A fake `mlsys train`: every layout issues 100 kernels (50 matmuls) over 4 layers and 10 tensors."""
    return {"host_work": {"ops": 100, "matmuls": 50, "layers": 4, "tensors": 10}}


def test_fit_solves_the_three_host_bound_rows():
    """Costs op 1 ms, DTensor matmul 8 ms, FSDP2 layer 12.5 ms give: TP (m 1) 100 x 1 + 50 x 8 = 0.5 s; FSDP2 (m 2)
    2 x (100 x 1 + 4 x 12.5) = 0.3 s; FSDP2 x TP (m 1) 100 + 400 + 50 = 0.55 s. The fit recovers them; the
    optimizer: mean(0.02, 0.01, 0.03) / 10 tensors = 2 ms a tensor."""
    rows = [_row("tp", tp=2, fwd_bwd_s=0.5, optimizer_s=0.02),
            _row("fsdp", micro_batches=2, fwd_bwd_s=0.3, optimizer_s=0.01),
            _row("fsdp-tp", tp=2, dp=2, fwd_bwd_s=0.55, optimizer_s=0.03)]
    got = fit.fit(rows, "hgx-h200", _runner)
    assert got == pytest.approx({"op_s": 1e-3, "dtensor_matmul_s": 8e-3, "fsdp_layer_s": 12.5e-3, "dtensor_param_s": 2e-3})


def test_profiled_op_s_removes_the_optimizer_and_the_profiler_inflation():
    """host_busy 0.2 s over 100 top-level ops, of which 2 x 10 tensors + 4 layers + 1 are the optimizer's: 0.75 is
    forward+backward; the TP step 0.3 s timed, 0.5 s profiled (largest window): x 0.6; over 100 kernels: 0.9 ms."""
    single = _row("single", profile_per_rank=[{"host_busy_s": 0.2, "host_ops": 100}])
    tp = _row("tp", step_time_s=0.3, profile_per_rank=[{"window_s": 0.4}, {"window_s": 0.5}])
    assert fit.profiled_op_s([single, tp], "hgx-h200", _runner) == pytest.approx(0.9e-3)
