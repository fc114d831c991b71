"""The alpha-beta collective model against hand arithmetic, nccl-tests' busbw, and properties."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsyscalc.calc.comm.collectives import COLLECTIVES, busbw_factor, collective_cost
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.cluster import builtin_clusters, load_cluster

GiB = 1024**3
H100 = load_cluster("hgx-h100")  # NVLink 370 GB/s achievable (450 line rate), 3.4 us; NIC 50 GB/s, 14 us per GPU
NVL = 370e9  # nccl-tests issue #212: NCCL's effective NVLink 4 bandwidth, about 82% of the 450 GB/s line rate


def test_ring_all_reduce_by_hand():
    cost = collective_cost("all-reduce", GiB, 8, "hgx-h100")
    assert cost.time_s == pytest.approx(14 * 3.4e-6 + 2 * 7 / 8 * GiB / NVL, rel=1e-12)
    assert cost.bytes_per_gpu == pytest.approx(2 * 7 / 8 * GiB)
    assert cost.algbw_Bps == pytest.approx(GiB / cost.time_s)
    assert cost.busbw_Bps == pytest.approx(cost.algbw_Bps * 1.75)


@pytest.mark.parametrize("collective, steps, factor", [
    ("all-gather", 7, 7 / 8), ("reduce-scatter", 7, 7 / 8), ("all-to-all", 7, 7 / 8),
    ("broadcast", 7, 1.0), ("reduce", 7, 1.0),
])
def test_other_collectives_by_hand(collective, steps, factor):
    cost = collective_cost(collective, 256 * 2**20, 8, H100)
    assert cost.time_s == pytest.approx(steps * 3.4e-6 + factor * 256 * 2**20 / NVL, rel=1e-12)


def test_p2p_across_nodes_uses_the_nic():
    cost = collective_cost("p2p", 2**30, 2, H100, nodes=2)
    assert cost.time_s == pytest.approx(14e-6 + 2**30 / 50e9)


def test_busbw_factors_are_nccl_tests():
    assert busbw_factor("all-reduce", 8) == 1.75
    assert busbw_factor("all-gather", 8) == busbw_factor("reduce-scatter", 8) == busbw_factor("all-to-all", 8) == 0.875
    assert busbw_factor("broadcast", 8) == busbw_factor("reduce", 8) == busbw_factor("p2p", 2) == 1.0
    with pytest.raises(MlsysError, match="unknown collective"):
        busbw_factor("allreduce", 8)


@pytest.mark.parametrize("collective, gpus", [
    (c, g) for c in COLLECTIVES for g in (2, 4, 8) if c != "p2p" or g == 2  # p2p joins two GPUs
])
def test_busbw_equals_link_bandwidth_without_latency(collective, gpus):
    """The point of busbw: with alpha = 0 every ring collective's busbw is the link bandwidth."""
    spec = H100.with_links(latency_us=0)
    assert collective_cost(collective, GiB, gpus, spec).busbw_Bps == pytest.approx(NVL)


def test_tree_by_hand():
    cost = collective_cost("all-reduce", GiB, 8, H100, algo="tree")
    assert cost.time_s == pytest.approx(2 * 3 * 3.4e-6 + 2 * GiB / NVL)
    small = 64 * 1024
    assert collective_cost("all-reduce", small, 8, H100, algo="tree").time_s < \
        collective_cost("all-reduce", small, 8, H100, algo="ring").time_s  # fewer latency steps
    with pytest.raises(MlsysError, match="tree is defined for"):
        collective_cost("all-gather", GiB, 8, H100, algo="tree")


def test_hierarchical_all_reduce_is_rs_inter_ar_ag():
    n, g, nodes = GiB, 8, 4
    cost = collective_cost("all-reduce", n, g * nodes, H100, nodes=nodes, algo="hierarchical")
    intra = (g - 1) * 3.4e-6 + (g - 1) / g * n / NVL  # reduce-scatter, then the same all-gather
    inter = 2 * (nodes - 1) * 14e-6 + 2 * (nodes - 1) / nodes * (n / g) / 50e9
    assert [p.name.split()[1] for p in cost.phases] == ["reduce-scatter", "all-reduce", "all-gather"]
    assert cost.time_s == pytest.approx(2 * intra + inter)


def test_flat_ring_across_nodes_uses_rails():
    """Eight rings, one per NIC: bandwidth min(NVLink, 8 x NIC) = min(370, 400) GB/s; NIC latency per step."""
    cost = collective_cost("all-reduce", GiB, 16, H100, nodes=2, algo="ring")
    assert cost.time_s == pytest.approx(30 * 14e-6 + 2 * 15 / 16 * GiB / 370e9)
    wide = collective_cost("all-reduce", GiB, 16, H100.with_links(bandwidth_GBps=450), nodes=2, algo="ring")
    assert wide.time_s == pytest.approx(30 * 14e-6 + 2 * 15 / 16 * GiB / 400e9)  # here the 8 NICs are the limit
    one_per_node = collective_cost("all-reduce", GiB, 4, H100, nodes=4)
    assert one_per_node.time_s == pytest.approx(6 * 14e-6 + 1.5 * GiB / 50e9)


def test_all_to_all_across_nodes_by_hand():
    n, p, g = GiB, 16, 8
    cost = collective_cost("all-to-all", n, p, H100, nodes=2)
    assert cost.transfer_s == pytest.approx(max((g - 1) / p * n / NVL, (p - g) / p * n / 50e9))


def test_auto_picks_the_fastest():
    for size in (8 * 1024, GiB):
        auto = collective_cost("all-reduce", size, 64, H100, nodes=8, algo="auto")
        others = [collective_cost("all-reduce", size, 64, H100, nodes=8, algo=a).time_s
                  for a in ("ring", "tree", "hierarchical")]
        assert auto.time_s == min(others)


@pytest.mark.parametrize("kwargs, message", [
    ({"gpus": 1}, "at least 2 GPUs"),
    ({"gpus": 16}, "a hgx-h100 node has 8"),
    ({"gpus": 12, "nodes": 5}, "do not split evenly"),
    ({"size_bytes": 0}, "size must be positive"),
])
def test_bad_layouts(kwargs, message):
    args = {"collective": "all-reduce", "size_bytes": GiB, "gpus": 8, "cluster": H100, **kwargs}
    with pytest.raises(MlsysError, match=message):
        collective_cost(**args)


sizes = st.integers(min_value=1, max_value=2**34)
DATASHEET = sorted(n for n, c in builtin_clusters().items() if not c.measured)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(COLLECTIVES), sizes, sizes, st.sampled_from([(2, 1), (8, 1), (16, 2), (64, 8), (8, 8)]),
       st.sampled_from(["ring", "hierarchical", "auto"]), st.sampled_from(DATASHEET))
def test_more_bytes_never_less_time(collective, a, b, layout, algo, cluster):
    gpus, nodes = layout
    if collective == "p2p":
        gpus, nodes = 2, min(nodes, 2)
    small, large = sorted((a, b))
    t_small = collective_cost(collective, small, gpus, cluster, nodes, algo).time_s
    t_large = collective_cost(collective, large, gpus, cluster, nodes, algo).time_s
    assert t_large >= t_small > 0


@settings(max_examples=100, deadline=None)
@given(sizes, st.sampled_from([(2, 1), (4, 1), (8, 1), (16, 2), (32, 4), (4, 4)]), st.sampled_from(DATASHEET))
def test_ring_all_reduce_is_reduce_scatter_plus_all_gather(n, layout, cluster):
    gpus, nodes = layout
    ar = collective_cost("all-reduce", n, gpus, cluster, nodes)
    rs = collective_cost("reduce-scatter", n, gpus, cluster, nodes)
    ag = collective_cost("all-gather", n, gpus, cluster, nodes)
    assert ar.time_s == pytest.approx(rs.time_s + ag.time_s, rel=1e-12)
    assert ar.bytes_per_gpu == pytest.approx(rs.bytes_per_gpu + ag.bytes_per_gpu, rel=1e-12)


def test_cluster_lookup_aliases_files_and_suggestions(tmp_path):
    assert load_cluster("DGX-H100").name == "hgx-h100"
    with pytest.raises(MlsysError, match="did you mean: hgx-h100"):
        load_cluster("hgx-h10")
    data = H100.to_dict() | {"name": "mine", "aliases": []}
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    mine = load_cluster(str(path))
    for ours, theirs in ((mine.intra, H100.intra), (mine.inter, H100.inter)):
        assert ours.bandwidth_Bps == pytest.approx(theirs.bandwidth_Bps)
        assert ours.latency_s == pytest.approx(theirs.latency_s)
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x", "gpus_per_node": 0, "intra_node": {}}))
    with pytest.raises(MlsysError, match="malformed cluster spec"):
        load_cluster(str(tmp_path / "bad.json"))


def test_builtin_clusters_are_consistent_with_gpu_datasheets():
    """The line rate per direction is half the GPU's bidirectional NVLink/PCIe figure; the achievable
    bandwidth the model uses is at most that (NVLink 4: 370 of 450 GB/s, nccl-tests issue #212)."""
    from mlsyscalc.specs.gpu import load_gpu

    for spec in builtin_clusters().values():
        if spec.measured:
            continue
        gpu = load_gpu(spec.gpu)
        link = gpu.nvlink_Bps or gpu.pcie_Bps
        line = spec.intra.line_rate_Bps or spec.intra.bandwidth_Bps
        assert line == pytest.approx(link / 2), spec.name
        assert spec.intra.bandwidth_Bps <= line and (spec.intra.bandwidth_Bps == line or spec.intra.line_rate_Bps)
        assert spec.source and spec.inter is not None and spec.inter.bandwidth_Bps < spec.intra.bandwidth_Bps


def test_per_collective_measured_values_take_precedence():
    from dataclasses import replace

    from mlsyscalc.specs.cluster import Link

    link = Link("fit", 300e9, 5e-6, {"all-gather": (200e9, 1e-6)})
    spec = replace(H100, intra=link)
    ag = collective_cost("all-gather", GiB, 2, spec)
    ar = collective_cost("all-reduce", GiB, 2, spec)
    assert ag.time_s == pytest.approx(1e-6 + GiB / 2 / 200e9)
    assert ar.time_s == pytest.approx(2 * 5e-6 + GiB / 300e9)
    assert math.isfinite(ar.busbw_Bps)
