"""scripts/train_measure.py (torch.distributed's own parallelism) and scripts/validate/train_compare.py (vs mlsys train)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
tm = load_script("train_measure")


def test_layouts():
    """Every case does --seqs-per-gpu sequences of work a GPU (here 2)."""
    assert tm.layout("single", 1) == {"dp": 1, "tp": 1, "pp": 1, "vp": 1, "micro_batch": 2, "micro_batches": 1}
    assert tm.layout("ddp", 4) == {"dp": 4, "tp": 1, "pp": 1, "vp": 1, "micro_batch": 2, "micro_batches": 1}
    assert tm.layout("tp", 2) == {"dp": 1, "tp": 2, "pp": 1, "vp": 1, "micro_batch": 4, "micro_batches": 1}
    assert tm.layout("pp-interleaved", 4) == {"dp": 1, "tp": 1, "pp": 4, "vp": 2, "micro_batch": 1, "micro_batches": 8}
    assert tm.layout("fsdp-tp", 4) == {"dp": 2, "tp": 2, "pp": 1, "vp": 1, "micro_batch": 4, "micro_batches": 1}
    # 2 stages x tp 2: 8 micro-batches of one sequence over 4 GPUs is 2 sequences a GPU
    assert tm.layout("tp-pp", 4) == {"dp": 1, "tp": 2, "pp": 2, "vp": 1, "micro_batch": 1, "micro_batches": 8}
    # on 8 ranks: TP 2 inside pairs x FSDP2 over 4 pairs; TP 4 inside each of 2 stages, 16 micro-batches
    assert tm.layout("fsdp-tp", 8) == {"dp": 4, "tp": 2, "pp": 1, "vp": 1, "micro_batch": 4, "micro_batches": 1}
    assert tm.layout("tp-pp", 8) == {"dp": 1, "tp": 4, "pp": 2, "vp": 1, "micro_batch": 1, "micro_batches": 16}
    with pytest.raises(ValueError, match="4 ranks"):
        tm.layout("fsdp-tp", 2)
    with pytest.raises(ValueError, match="even number of at least 4 ranks, not 5"):
        tm.layout("tp-pp", 5)
    with pytest.raises(ValueError, match="4 ranks"):
        tm.layout("tp-pp", 2)
    with pytest.raises(ValueError, match="1 rank"):
        tm.layout("single", 2)


def test_two_gloo_ranks_run_every_parallelism_and_agree_on_the_loss(tmp_path):
    """DDP, FSDP2, DTensor TP (vocab-parallel head, loss_parallel), GPipe/1F1B/interleaved pipelines on 2 CPU ranks,
    bf16 weights with fp32 master weights: same initial weights, same tokens, so the first loss is the same to
    bf16 precision -- each parallel model computes the unsplit model."""
    pytest.importorskip("torch.distributed.pipelining")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts/train_measure.py"), "--device", "cpu", "--tiny", "--seq", "32", "--warmup", "1",
           "--steps", "2", "--out", str(tmp_path)]
    cases = ("ddp", "fsdp", "tp", "pp-gpipe", "pp-1f1b", "pp-interleaved")
    for case in cases:
        cmd += ["--case", case]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "train_rows.jsonl").read_text().splitlines()]
    assert tuple(r["case"] for r in rows) == cases
    # 2 sequences a GPU: dp 2 x micro 2 | tp 2 with micro 4 | 2 stages x 4 micro-batches of 1
    assert [r["global_batch"] for r in rows] == [4, 4, 4, 4, 4, 4]
    losses = [r["first_loss"] for r in rows]
    assert losses[0] == pytest.approx(5.545, abs=0.2)  # ln(256): an untrained model over a 256-token vocabulary
    assert all(loss == pytest.approx(losses[0], rel=0.03) for loss in losses)
    assert all(r["step_time_s"] >= r["fwd_bwd_s"] > 0 and r["optimizer_s"] > 0 for r in rows)
    assert all(len(r["peak_bytes_per_rank"]) == 2 for r in rows)


def test_compare_table_with_a_fake_train(tmp_path):
    tc = load_script("validate/train_compare")
    row = {"case": "fsdp", "model": {"base": "llama2-7b", "overrides": {"num_hidden_layers": 2}}, "gpus": 4,
           "dp": 4, "tp": 1, "pp": 1, "vp": 1, "micro_batch": 1, "seq": 2048, "global_batch": 4,
           "step_time_s": 0.5, "peak_bytes_per_rank": [2**30, 2 * 2**30, 2**30, 2**30], "env": {"device": "H200"}}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n" + json.dumps(row | {"case": "pp-interleaved", "dp": 1, "pp": 4, "vp": 2}) + "\n")
    seen = []

    def fake(args):
        seen.append(args)
        config = json.loads(Path(args[1]).read_text())
        assert config["num_hidden_layers"] == 2 and config["hidden_size"] == 4096  # llama2-7b with the override
        if "--vp" in args:
            raise RuntimeError("layers 2 do not split over pp 4 x vp 2")
        return {"step_time_s": 0.55, "memory_bytes_per_gpu": 1.9 * 2**30}

    page = tc.compare_table(rows, "hgx-h200", fake)
    assert seen[0][seen[0].index("--zero") + 1] == "3" and "--dp" in seen[0] and seen[0][seen[0].index("--dp") + 1] == "4"
    line = next(x for x in page.splitlines() if x.startswith("| fsdp"))
    assert "+10.0%" in line and "-5.0%" in line  # 0.55 / 0.5 - 1; 1.9 GiB against the largest rank's 2 GiB
    assert "do not split" in page


def test_trace_summary_merges_streams_and_finds_exposed_nccl():
    """Hand-made trace (us): a GEMM [0, 10) and an NCCL kernel [5, 15) on two streams, an elementwise kernel
    [20, 25), a CPU op that is no kernel. Window 25, busy = |[0,15) u [20,25)| = 20, idle 5, compute 15,
    NCCL 10 of which [10, 15) runs alone: 5 exposed. Two steps: everything halved."""
    ts = load_script("trace_summary")
    k = lambda name, t, d: {"ph": "X", "cat": "kernel", "name": name, "ts": t, "dur": d}  # noqa: E731
    events = [k("sm90_xmma_gemm_bf16", 0, 10), k("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 5, 10),
              k("vectorized_elementwise_kernel", 20, 5),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 30}]
    got = ts.summarize(events, steps=2)
    want = {"window_s": 12.5, "busy_s": 10, "idle_s": 2.5, "compute_busy_s": 7.5, "nccl_s": 5, "nccl_exposed_s": 2.5,
            "matmul_s": 5, "attention_s": 0, "other_s": 2.5, "host_busy_s": 15}
    host = {"host_ops": 0.5, "host_launches": 0, "host_us_per_op": 30, "host_blocked_s": 0}  # one op of 30 us, two steps
    assert got == pytest.approx({key: v * 1e-6 for key, v in want.items()} | host)
    assert ts.kernel_class("flash_fwd_kernel") == "attention" and ts.kernel_class("nvjet_tst_128x256") == "matmul"
    # kernel names seen on an H200 (torch 2.11): cuDNN's SDPA carries "wgmma", FA2's template args "cutlass"
    assert ts.kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26") == "attention"
    assert ts.kernel_class("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, cutlass::bfloat16_t>>") == "attention"


def test_trace_summary_host_counts_top_level_ops_once():
    """Thread 1: aten::linear [0, 40) holding aten::mm [5, 35) (nested: not counted), then aten::add [50, 60),
    then aten::item [80, 100) waiting for the GPU; thread 2 (autograd): aten::mm_backward [30, 70). Top-level
    ops 4; busy = |[0,40) u [50,60) u [30,70)| = 70 us over the 3 that issue work; blocked 20 us. Two launches
    (cudaLaunchKernel, cuLaunchKernelEx), a cudaMemcpyAsync that is none."""
    ts = load_script("trace_summary")
    op = lambda name, t, d, tid=1: {"ph": "X", "cat": "cpu_op", "name": name, "ts": t, "dur": d, "pid": 0, "tid": tid}  # noqa: E731
    rt = lambda name: {"ph": "X", "cat": "cuda_runtime", "name": name, "ts": 6, "dur": 1, "pid": 0, "tid": 1}  # noqa: E731
    events = [op("aten::linear", 0, 40), op("aten::mm", 5, 30), op("aten::add", 50, 10), op("aten::mm_backward", 30, 40, 2),
              op("aten::item", 80, 20), op("aten::_local_scalar_dense", 81, 18),
              rt("cudaLaunchKernel"), {**rt("cuLaunchKernelEx"), "cat": "cuda_driver"}, rt("cudaMemcpyAsync")]
    got = ts.host_summary(events)
    assert got == pytest.approx({"host_ops": 4, "host_launches": 2, "host_busy_s": 70e-6, "host_blocked_s": 20e-6,
                                 "host_us_per_op": 70 / 3})


def test_a_pipeline_stage_frees_the_rest_of_the_model():
    """A stage keeps its own layers only: once the caller drops the model, the other stages' weights are freed
    (a stage that kept the whole model alive inflated every rank's measured memory)."""
    import gc
    import weakref

    torch = pytest.importorskip("torch")
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model

    model = build_model(load_model(*tm.TINY), "bfloat16", "cpu")
    other = weakref.ref(model.layers[3])
    whole = weakref.ref(model)
    stage = tm.stage_module(model, 0, 2, 16, torch.empty(0, dtype=torch.bfloat16))
    del model
    gc.collect()
    assert whole() is None and other() is None
    assert len(stage.layers) == 2 and stage.embed is not None and stage.lm_head is None
    assert stage(torch.zeros(1, 16, dtype=torch.long)).shape == (1, 16, 64)


def test_four_gloo_ranks_tp_inside_pipeline_stages_compute_the_unsplit_model(tmp_path):
    """TP 2 inside each of 2 1F1B stages (4 CPU ranks) against the plain 4-stage 1F1B pipeline: the same
    initial weights and tokens, so the same first loss to bf16 precision."""
    pytest.importorskip("torch.distributed.pipelining")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           str(ROOT / "scripts/train_measure.py"), "--device", "cpu", "--tiny", "--seq", "32", "--warmup", "1",
           "--steps", "1", "--out", str(tmp_path), "--case", "tp-pp", "--case", "pp-1f1b"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "train_rows.jsonl").read_text().splitlines()]
    assert [(r["case"], r["tp"], r["pp"], r["global_batch"]) for r in rows] == [("tp-pp", 2, 2, 8), ("pp-1f1b", 1, 4, 8)]
    assert rows[0]["first_loss"] == pytest.approx(rows[1]["first_loss"], rel=0.03)
    assert rows[0]["first_loss"] == pytest.approx(5.545, abs=0.2)  # ln(256), an untrained model
    assert len(rows[0]["peak_bytes_per_rank"]) == 4


def test_eight_gloo_ranks_run_the_8gpu_layouts_and_compute_the_unsplit_model(tmp_path):
    """The layouts of the 8-GPU run (scripts/validate/eight_gpu_plan.py) on 8 CPU ranks: DTensor TP 8, FSDP2 over 8, TP 4
    inside each of 2 1F1B stages, TP 2 x FSDP2 4. The same initial weights and tokens: the same first loss to
    bf16 precision, so each split computes the unsplit model; every rank reports its peak."""
    pytest.importorskip("torch.distributed.pipelining")
    plan = load_script("validate/eight_gpu_plan")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "8",
           str(ROOT / "scripts/train_measure.py"), *plan.train_flags(), "--device", "cpu", "--model", "tiny",
           "--seq", "16", "--warmup", "0", "--steps", "1", "--out", str(tmp_path)]
    cmd += [a for case in plan.TRAIN_CASES for a in ("--case", case)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "train_rows.jsonl").read_text().splitlines()]
    assert [(r["case"], r["dp"], r["tp"], r["pp"], r["global_batch"]) for r in rows] == [
        ("tp", 1, 8, 1, 16), ("fsdp", 8, 1, 1, 16), ("tp-pp", 1, 4, 2, 16), ("fsdp-tp", 4, 2, 1, 16)]
    for row in rows:
        assert plan.layout_of(row) == plan.layout_of(plan.planned_row(row["case"]))  # what the predictions priced
        assert row["first_loss"] == pytest.approx(rows[0]["first_loss"], rel=0.03)
        assert len(row["peak_bytes_per_rank"]) == 8
    assert rows[0]["first_loss"] == pytest.approx(5.545, abs=0.2)  # ln(256), an untrained model


def test_a_layout_the_ranks_cannot_run_is_bad_usage():
    """Exit 2 with the reason before any process group starts (here WORLD_SIZE 2 for a two-halves case)."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts/train_measure.py"), "--case", "tp-pp", "--device", "cpu"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "WORLD_SIZE": "2"})
    assert done.returncode == 2 and "even number of at least 4 ranks, not 2" in done.stderr
