"""Tensor parallel (DTensor) and FSDP2 whole-model paths on two gloo CPU ranks: the sharded model
computes what the unsharded one computes (same seed, same weights), and `mlsys bench model --tp 2`
under two ranks writes one row priced by the roofline with tp=2."""

from __future__ import annotations

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")

SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 97}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


JOBS = ("tp", "fsdp", "cli")


def _worker(rank: int, port: int, out_dir: str) -> None:
    """Every job on one process group (one spawn: torch is imported once per rank)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank))
    import torch.distributed as dist

    from mlsyscalc.bench import model_parallel

    model_parallel.world()
    try:
        for job in JOBS:
            _job(rank, out_dir, job)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _job(rank: int, out_dir: str, job: str) -> None:
    from mlsyscalc.bench import model_parallel
    from mlsyscalc.bench.torch_models import build_model
    from mlsyscalc.specs.lookup import load_model

    spec = load_model("llama3-8b", SMALL)
    result: dict = {}
    try:
        torch.manual_seed(0)
        ref = build_model(spec, "float32", "cpu")
        torch.manual_seed(0)
        model = build_model(spec, "float32", "cpu")
        ids = torch.randint(0, spec.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
        if job == "tp":
            model_parallel.apply_tp(model, 2, "cpu")
            full = ref.logits(ids)
            caches = model.new_caches(2, 9)
            result["cache_kv_heads"] = caches[0][0].shape[2]
            result["prefill"] = (model.prefill(ids[:, :8], caches) - full[:, 7]).abs().max().item()
            result["decode"] = (model.decode(ids[:, 8:], caches, 8) - full[:, 8]).abs().max().item()
        elif job == "fsdp":
            model_parallel.apply_fsdp(model)
            loss = model(ids, ids)
            loss.backward()
            ref_loss = ref(ids, ids)
            ref_loss.backward()
            result["loss"] = abs(loss.item() - ref_loss.item())
            grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
            result["grad"] = max((grads[n] - p.grad).abs().max().item() for n, p in ref.named_parameters())
        else:  # the CLI under two ranks
            from click.testing import CliRunner

            from mlsyscalc.cli.main import cli

            args = ["bench", "model", "llama3-8b", *[f"--set={k}={v}" for k, v in SMALL.items()], "--phase", "prefill",
                    "--seq", "16", "--tp", "2", "--mode", "eager", "--cpu", "--reps", "1", "--quiet", "--json"]
            run = CliRunner().invoke(cli, args)
            result = {"exit": run.exit_code, "output": run.output}
    finally:
        with open(os.path.join(out_dir, f"{job}{rank}.json"), "w") as handle:
            json.dump(result, handle)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> dict[str, list[dict]]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ranks")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=2, join=True)
    return {job: [json.loads((out / f"{job}{r}.json").read_text()) for r in range(2)] for job in JOBS}


def test_tensor_parallel_logits_equal_the_unsharded_model(ranks):
    for rank in ranks["tp"]:
        assert rank["cache_kv_heads"] == 1  # 2 KV heads over 2 ranks
        assert rank["prefill"] < 1e-4 and rank["decode"] < 1e-4


def test_fsdp_loss_and_gradients_equal_the_unsharded_model(ranks):
    """Both ranks see the same batch, so FSDP's averaged gradient equals the single-process one."""
    for rank in ranks["fsdp"]:
        assert rank["loss"] < 1e-5 and rank["grad"] < 1e-5


def test_cli_row_under_two_ranks_is_priced_with_tp2(ranks):
    from mlsyscalc.calc.roofline.calibration import load_ceilings
    from mlsyscalc.calc.roofline.model import RooflineOptions, predict_model
    from mlsyscalc.specs.lookup import load_model

    cli = ranks["cli"]
    assert cli[0]["exit"] == 0 and cli[1]["exit"] == 0 and cli[1]["output"] == ""
    row = json.loads(cli[0]["output"])["rows"][0]
    assert row["error"] is None and "tp2" in row["variant"] and row["extra_tp"] == 2
    # bench model prices with the kernels plain PyTorch runs and the last position's logits
    want = predict_model(load_model("llama3-8b", SMALL), load_ceilings("H100-SXM"),
                         RooflineOptions(phase="prefill", batch=1, seq=16, tp=2, check_fit=False, impl="torch",
                                         logits="last")).time_s
    assert row["predicted_ms"] == pytest.approx(want * 1e3, rel=1e-12)
