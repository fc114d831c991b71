"""The host path of an eager one-GPU training step (calc.roofline.host): step = max(GPU path, host path)."""

import pytest

from mlsyscalc.calc.roofline.calibration import load_ceilings
from mlsyscalc.calc.roofline.calibration_fit import Observation, Term, predict
from mlsyscalc.calc.roofline.host import EAGER_HOST_S
from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
from mlsyscalc.errors import MlsysError
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


def test_a_small_gemm_runs_at_least_the_gemm_floor():
    """gpt2's 768x768 decode projection: 1.18 MB at 0.78 x 3.35 TB/s is 0.45 us, and 1.67 us by its
    12 CTAs at 59 GB/s each (the few-CTA cap), both under the 2.15 us floor, so 2.15 + 2.0 = 4.15 us
    (the H100 profiles: 4.08-4.19 us per kernel)."""
    from mlsyscalc.calc.roofline.ops import predict_matmul

    small = predict_matmul(1, 768, 768, gpu=CEIL)
    assert small.memory_s == pytest.approx((768 * 768 + 768 + 768) * 2 / (12 * 59e9), rel=1e-3)
    assert small.predicted_s == pytest.approx(4.15e-6) and small.bound == "overhead"
    big = predict_matmul(1, 4096, 4096, gpu=CEIL)  # 33.6 MB: streams for 12.8 us, longer than the floor
    assert big.predicted_s == pytest.approx(big.memory_s + 2e-6)
    int4 = predict_matmul(1, 768, 768, gpu=CEIL, weight_dtype="int4")  # the project's GEMV: no cuBLAS floor
    assert int4.floor_s == 0.0 and int4.predicted_s == pytest.approx(max(int4.memory_s, int4.compute_s) + 2e-6)


def test_the_gemm_floor_round_trips_through_a_calibration_file():
    from mlsyscalc.bench.model_calibrate import record

    params = {"launch_s": 2.5e-6, "matmul_floor_s": 1.5e-6}
    back = load_ceilings("H100-SXM", record(CEIL, params, ["m"]))
    assert (back.launch_s, back.matmul_floor_s) == (2.5e-6, 1.5e-6)
    term = Term(count=2, kind="matmul", compute_s=0.0, memory_s=1e-6, skinny=True, floor_s=2.15e-6)
    base = (0.74, 0.61, 0.89, 0.78, 0.32, 0.12, 0.49)
    # 2 x (max(1 us, 1.5 us floor) + 2.5 us) = 8 us
    assert predict(Observation("o", 1.0, (term,), base), {"matmul_skinny": 0.78, **params}) == pytest.approx(8e-6)


def test_eager_inference_host_path_is_per_layer():
    """--launch eager: 0.699 ms per decoder layer (gpt2: 12 layers = 8.388 ms), the step the longer of
    that and the GPU's path; a CUDA-graph launch has no host path."""
    eager = _decode("gpt2", launch="eager")
    graph = _decode("gpt2", launch="graph")
    assert eager.host_path_s == pytest.approx(12 * 0.699e-3, abs=0)
    assert eager.time_s == pytest.approx(max(eager.gpu_s, 12 * 0.699e-3), abs=0)
    assert graph.host_path_s == 0 and graph.time_s == graph.gpu_s
    assert graph.gpu_s == eager.gpu_s  # the same kernels either way


def test_eager_inference_host_path_only_for_torch_kernels_on_one_gpu():
    """--impl fused prices fused kernels and no host; a TP step's host terms are not this model's."""
    assert _decode("gpt2", launch="eager", impl="fused").host_path_s == 0
    assert _decode("llama2-7b", launch="eager", tp=2).host_path_s == 0
    assert _decode("llama2-7b", launch="eager").host_path_s == pytest.approx(32 * 0.699e-3, abs=0)


def test_training_step_is_eager_by_default_and_a_graph_replay_has_no_host_path():
    """A training step is issued eagerly unless captured: eager prices kernels x 29 us of host, the
    default and launch "eager" are the same step, and a CUDA-graph replay is the GPU's time alone."""
    spec, ceilings = load_model("gpt2"), load_ceilings("H100-SXM")
    default = predict_model(spec, ceilings, RooflineOptions(phase="train", seq=512, impl="torch"))
    eager = predict_model(spec, ceilings, RooflineOptions(phase="train", seq=512, impl="torch", launch="eager"))
    graph = predict_model(spec, ceilings, RooflineOptions(phase="train", seq=512, impl="torch", launch="graph"))
    assert default.time_s == eager.time_s
    assert eager.host_path_s == pytest.approx(eager.kernels * 29e-6, rel=1e-12) and eager.host_path_s > 0
    assert graph.host_path_s == 0 and graph.kernels == eager.kernels
    assert graph.time_s == pytest.approx(graph.gpu_s, rel=1e-12) and graph.gpu_s == pytest.approx(eager.gpu_s, rel=1e-12)
    assert eager.time_s == pytest.approx(max(eager.gpu_s, eager.host_path_s), rel=1e-12)


def test_unknown_launch_is_rejected():
    spec = load_model("gpt2")
    with pytest.raises(MlsysError, match="launch must be one of graph, eager"):
        predict_model(spec, load_ceilings("H100-SXM"), RooflineOptions(phase="decode", context=10, launch="lazy"))


def _decode(model: str, **kw):
    kw.setdefault("impl", "torch")
    return predict_model(load_model(model), load_ceilings("H100-SXM"),
                         RooflineOptions(phase="decode", context=1023, batch=1, **kw))
