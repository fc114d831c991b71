"""The host path of an eager one-GPU training step (calc.roofline_host): step = max(GPU path, host path)."""

import pytest

from mlsyscalc.calc.calibration import load_ceilings
from mlsyscalc.calc.calibration_fit import Observation, Term, predict
from mlsyscalc.calc.roofline_host import EAGER_HOST_S
from mlsyscalc.calc.roofline_model import RooflineOptions, predict_model
from mlsyscalc.specs.lookup import load_model

CEIL = load_ceilings("H100-SXM", None)


def _roof(phase, batch, seq, impl="torch", **kw):
    extra = {"context": seq} if phase == "decode" else {"seq": seq}
    opts = RooflineOptions(phase=phase, batch=batch, impl=impl, check_fit=False, master_weights=False, **extra, **kw)
    return predict_model(load_model("gpt2"), CEIL, opts)


def test_host_bound_step_takes_the_host_path():
    # gpt2 B1 S128: ~800 kernels of a few microseconds each; the host needs 29 us for each.
    roof = _roof("train", 1, 128)
    assert roof.host_path_s == pytest.approx(roof.kernels * 29e-6)
    assert roof.host_path_s > roof.gpu_s  # small step: the host paces it
    assert roof.time_s == pytest.approx(roof.host_path_s)
    assert roof.host_s == pytest.approx(roof.host_path_s - roof.gpu_s)
    assert roof.totals()["host_s"] + roof.totals()["gpu_s"] == pytest.approx(roof.totals()["predicted_s"])


def test_gpu_bound_step_keeps_the_gpu_path():
    roof = _roof("train", 16, 1024)
    assert roof.host_path_s < roof.gpu_s
    assert roof.host_s == 0.0 and roof.time_s == roof.gpu_s


@pytest.mark.parametrize("case", [("prefill", 1, 128, "torch"), ("decode", 1, 128, "torch"), ("train", 1, 128, "fused")])
def test_no_host_path_for_graphs_or_fused(case):
    phase, batch, seq, impl = case
    roof = _roof(phase, batch, seq, impl)
    assert roof.host_path_s == 0.0 and roof.time_s == roof.gpu_s


def test_calibration_predict_takes_the_longer_path():
    term = Term(count=10, kind="memory", compute_s=0.0, memory_s=1e-6)
    base = (0.74, 0.61, 0.89, 0.78, 0.32, 0.12, 0.49)
    params = {"memory": 0.89, "launch_s": 2e-6}
    # GPU path: 10 x (1 us + 2 us) = 30 us
    assert predict(Observation("gpu", 1.0, (term,), base, 0.0, 20e-6), params) == pytest.approx(30e-6)
    assert predict(Observation("host", 1.0, (term,), base, 0.0, 45e-6), params) == pytest.approx(45e-6)
    assert EAGER_HOST_S == pytest.approx(29e-6)
