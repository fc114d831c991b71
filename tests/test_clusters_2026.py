"""Clusters of 2026: DGX B200, HGX B300, GB200/GB300 NVL72 (a 72-GPU NVLink domain of 4-GPU trays), the
MI300X/MI325X/MI355X platforms, and the export parts' boxes."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.train.step import resolve_cluster
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import cluster_from_dict, load_cluster
from mlsyscalc.specs.gpu import load_gpu

NEW = {"dgx-b200": "B200", "hgx-b300": "B300", "gb200-nvl72": "GB200", "gb300-nvl72": "GB300", "mi300x-node": "MI300X",
       "mi325x-node": "MI325X", "mi355x-node": "MI355X", "hgx-h20": "H20", "pcie-l20": "L20"}


@pytest.mark.parametrize("name,gpu", NEW.items())
def test_each_gpu_has_its_cluster(name, gpu):
    spec = load_cluster(name)
    assert load_gpu(spec.gpu).name == gpu and spec.source and spec.inter is not None
    assert resolve_cluster(gpu, None, 2 * spec.scale_up_gpus).name == name  # spanning domains: one with a NIC
    # per direction at most the line rate, which is half the datasheet's both-ways figure
    line = spec.intra.line_rate_Bps or spec.intra.bandwidth_Bps
    assert spec.intra.bandwidth_Bps <= line
    if load_gpu(gpu).nvlink_Bps:
        assert line <= load_gpu(gpu).nvlink_Bps / 2 * 1.0001


def test_nvl72_is_a_72_gpu_domain_of_4_gpu_trays():
    for name in ("gb200-nvl72", "gb300-nvl72"):
        spec = load_cluster(name)
        assert (spec.gpus_per_node, spec.scale_up_gpus) == (4, 72)
        # 1.8 TB/s a GPU both ways (130 TB/s for 72), 900 each way; 680 measured by NCCL's ring (75.5%)
        assert spec.intra.line_rate_Bps == 900e9 and spec.intra.bandwidth_Bps == 680e9
    # one NIC per GPU between racks: ConnectX-7 400 Gb/s on GB200, ConnectX-8 800 Gb/s on GB300
    assert load_cluster("gb200-nvl72").inter.bandwidth_Bps == 400e9 / 8
    assert load_cluster("gb300-nvl72").inter.bandwidth_Bps == 800e9 / 8
    assert load_cluster("nvl72").name == "gb200-nvl72"


def test_domain_round_trips_and_is_checked():
    spec = load_cluster("gb200-nvl72")
    data = spec.to_dict()
    assert data["nvlink_domain_gpus"] == 72 and "nvlink_domain_gpus" not in load_cluster("hgx-h100").to_dict()
    back = cluster_from_dict(data, "x")
    assert (back.scale_up_gpus, back.gpus_per_node, back.intra.bandwidth_Bps) == (72, 4, 680e9)
    with pytest.raises(MlsysError, match="nvlink_domain_gpus.*70 must be a multiple of gpus_per_node 4"):
        cluster_from_dict({**data, "nvlink_domain_gpus": 70}, "x")


def test_amd_mesh_bandwidth_is_seven_links_at_rccls_usable_rate():
    # RCCL: 48 GB/s usable a direction of each 64 GB/s gfx942 xGMI link; 7 peers
    assert load_cluster("mi300x-node").intra.bandwidth_Bps == 7 * 48e9
    assert load_cluster("mi300x-node").intra.line_rate_Bps == 7 * 64e9
    assert load_cluster("mi355x-node").intra.bandwidth_Bps == pytest.approx(7 * 76.8e9 * 48 / 64)


def test_clusters_command_lists_the_domain(run_cli):
    rows = {c["name"]: c for c in run_cli.json("comm", "clusters")["clusters"]}
    assert rows["gb200-nvl72"]["nvlink_domain_gpus"] == 72 and rows["gb200-nvl72"]["gpus_per_node"] == 4
