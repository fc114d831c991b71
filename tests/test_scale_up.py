"""Scale-up domains larger than a node (GB200 NVL72: 72 GPUs on 18 trays of 4): the placement rule, TP and EP inside
the domain, the collective costs that follow, and plan searching them."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.calc.comm.step import StepOptions, step_comm
from mlsyscalc.calc.plan.space import PlanOptions, structures
from mlsyscalc.calc.train.options import TrainStepOptions
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import load_cluster
from mlsyscalc.specs.lookup import load_model

NVL72 = load_cluster("gb200-nvl72")


@pytest.mark.parametrize("gpus,used", [(8, 72), (72, 72), (144, 72), (256, 64), (576, 72), (100, 20), (2496, 64)])
def test_a_job_takes_the_same_gpus_from_each_domain(gpus, used):
    # the most that divides the job in whole 4-GPU trays, at most 72; within one domain, that domain
    assert NVL72.for_job(gpus).scale_up_gpus == used
    assert NVL72.for_job(gpus).for_job(gpus) == NVL72.for_job(gpus)  # idempotent


def test_the_domain_can_be_given_and_is_checked():
    assert NVL72.for_job(128, 32).scale_up_gpus == 32
    for bad in (70, 76, 2):
        with pytest.raises(MlsysError, match=f"--nvlink-domain {bad}: a multiple of the 4 GPUs"):
            NVL72.for_job(128, bad)
    with pytest.raises(MlsysError, match="rule whole nodes: 102 GPUs do not fill whole 4-GPU nodes"):
        NVL72.for_job(102)
    hgx = load_cluster("hgx-h100")
    assert hgx.for_job(64) is hgx and hgx.domain_word == "node" and NVL72.domain_word == "NVLink domain"


def test_a_collective_inside_the_domain_stays_on_nvlink():
    # all-reduce of 1 GiB over 72 GPUs: one NVL72 rack (intra link only) against 9 DGX B200 nodes (hierarchical, NICs)
    rack = collective_cost("all-reduce", 2**30, 72, NVL72, 1)
    boxes = collective_cost("all-reduce", 2**30, 72, load_cluster("dgx-b200"), 9, "auto")
    assert {p.link for p in rack.phases} == {NVL72.intra.name}
    # a ring over 72 GPUs: 2 x 71 steps of 3.4 us and 2 x 71/72 of the message at 680 GB/s
    assert rack.time_s == pytest.approx(2 * 71 * 3.4e-6 + 2 * 71 / 72 * 2**30 / 680e9, rel=1e-12)
    assert boxes.time_s > 1.5 * rack.time_s  # the fastest of ring, tree and hierarchical over 8 x 400 Gb/s a board
    with pytest.raises(MlsysError, match="73 GPUs per NVLink domain, but a gb200-nvl72 NVLink domain has 72"):
        collective_cost("all-reduce", 2**30, 73, NVL72, 1)


def test_tp_and_ep_inside_the_domain():
    spec = load_model("llama3-70b")
    TrainStepOptions(gpus=256, global_batch=256, tp=16, pp=4).check_layout(spec, NVL72.for_job(256))  # 64 a rack
    with pytest.raises(MlsysError, match="rule TP within a node: --tp 16 must divide the 8 GPUs of a dgx-b200 node"):
        TrainStepOptions(gpus=256, global_batch=256, tp=16, pp=4).check_layout(spec, load_cluster("dgx-b200"))
    with pytest.raises(MlsysError, match="rule TP within an NVLink domain: --tp 16 must divide the 72 GPUs"):
        TrainStepOptions(gpus=288, global_batch=288, tp=16, pp=2).check_layout(spec, NVL72.for_job(288))
    # the placement rule: tp 8 x dp 2 puts the pipeline's ranks 16 apart, which 72-GPU domains do not hold evenly
    deep = load_model("llama3-70b", {"num_hidden_layers": 72})
    with pytest.raises(MlsysError, match="a group with stride 16 straddles 72-GPU nodes"):
        TrainStepOptions(gpus=144, global_batch=144, tp=8, pp=9).check_layout(deep, NVL72.for_job(144))


def test_expert_parallel_all_to_all_stays_in_the_rack():
    spec = load_model("deepseek-v3")
    o = StepOptions(dp=64, tp=1, pp=4, ep=64, batch=1, seq=4096, grad_accum=4, dtype="bf16",
                    stages=tuple(tuple(range(a, b)) for a, b in ((0, 16), (16, 31), (31, 46), (46, 61))))
    rack, boxes = step_comm(spec, o, NVL72), step_comm(spec, o, "dgx-b200")
    ep = lambda r: next(row for row in r.rows if row.dim == "ep")  # noqa: E731
    assert (ep(rack).nodes, ep(boxes).nodes) == (1, 8)
    assert rack.nodes == 4 and boxes.nodes == 32  # 4 racks of 64, 32 boards of 8
    assert ep(boxes).time_s > 5 * ep(rack).time_s


def test_plan_searches_tp_up_to_the_domain():
    spec = load_model("llama3-70b")
    opts = PlanOptions(gpus=256, seq=8192, global_batch=256)
    rack = {lay.tp for lay in structures(spec, NVL72.for_job(256), opts)}
    boxes = {lay.tp for lay in structures(spec, load_cluster("dgx-b200"), opts)}
    assert boxes == {1, 2, 4, 8} and rack == {1, 2, 4, 8, 16, 32, 64}  # 64 heads: tp divides them and 64


def test_train_json_names_the_domain_used(run_cli):
    args = ("train", "llama3-8b", "--gpu", "GB200", "--seq", "4096", "--tp", "2", "--json")
    assert run_cli.json(*args, "--gpus", "256", "--global-batch", "256")["nvlink_domain_gpus"] == 64
    assert run_cli.json(*args, "--gpus", "256", "--global-batch", "256", "--nvlink-domain", "32")["nvlink_domain_gpus"] == 32
    assert run_cli.json(*args, "--gpus", "8", "--global-batch", "8")["nvlink_domain_gpus"] == 8
