"""Alpha-beta cost of NCCL-style collectives: ring, double binary tree, hierarchical.

A message of n bytes over p GPUs whose links have per-step latency alpha (s) and per-GPU
per-direction bandwidth B = 1/beta (B/s) (Hockney 1994; Thakur, Rabenseifner & Gropp 2005,
"Optimization of collective communication operations in MPICH", table 1; Patarasuk & Yuan 2009
for the bandwidth-optimal ring):

    ring all-reduce            2(p-1) alpha + 2(p-1)/p * n * beta
    ring all-gather / reduce-scatter, pairwise all-to-all
                               (p-1) alpha + (p-1)/p * n * beta
    pipelined broadcast/reduce (p-1) alpha + n * beta
    point-to-point             alpha + n * beta   (any p: every GPU sends n to one peer and
                               receives n from one, all pairs at once)
    double binary tree         2 ceil(log2 p) alpha + 2 n beta   (all-reduce; Sanders, Speck &
                               Traeff 2009; NCCL 2.4) and ceil(log2 p) alpha + n beta (broadcast, reduce)
    hierarchical all-reduce    intra-node reduce-scatter + inter-node all-reduce of n/g
                               + intra-node all-gather (g GPUs per node)

n is the message "size" as nccl-tests counts it (all-gather: the gathered output; reduce-scatter:
the full input; all-to-all: the whole send buffer of one rank). Time, algorithm bandwidth
(n / time) and bus bandwidth (algbw times 2(p-1)/p for all-reduce, (p-1)/p for all-gather,
reduce-scatter and all-to-all, 1 otherwise) follow nccl-tests' doc/PERFORMANCE.md, so with
alpha = 0 the bus bandwidth of every collective equals the link bandwidth B.

Where a link spec lists protocols (a measured spec does), each phase over that link takes the
fastest of them, as NCCL's tuner picks the protocol with the least modelled time (NVIDIA NCCL,
src/graph/tuning.cc: latency = steps x per-step latency, time = latency + bytes / bandwidth, per
protocol LL / LL128 / Simple): phase time = min over p of (base_p + steps alpha_p + bytes beta_p
+ (1 + 1/p) n / C_p), where base_p is paid once per call and alpha_p once per step (NCCL's baseLat and
hwLat), and C_p, where a spec gives it, is a buffer bandwidth: a cost per byte of the message plus one GPU's
share of it, whatever the ring length (a fitted term: bytes a GPU's kernel moves in its own memory besides
those it sends; `buffer_bytes`), so a fit on 2 GPUs carries
over to more GPUs of the same links through the ring's step count and bytes sent per GPU. A call
overhead H (host time to issue one call) bounds the time per call from below: consecutive calls
are issued while the GPU still runs the previous one, so a stream of calls runs at
max(H, device time) per call; `host_wait_s` = max(0, H - device time) is the part that adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import MlsysError, require
from ...specs.cluster import ClusterSpec, LinkTerms, Protocol, load_cluster

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce", "p2p")
ALGORITHMS = ("ring", "tree", "hierarchical", "auto")
TREE_COLLECTIVES = ("all-reduce", "broadcast", "reduce")


def busbw_factor(collective: str, gpus: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor."""
    p = gpus
    if collective == "all-reduce":
        return 2 * (p - 1) / p
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        return (p - 1) / p
    if collective in ("broadcast", "reduce", "p2p"):
        return 1.0
    raise MlsysError(f"unknown collective {collective!r} (use one of: {', '.join(COLLECTIVES)})")


@dataclass(frozen=True)
class Phase:
    """One stage of an algorithm on one link class; stages run one after another."""

    name: str
    link: str
    gpus: int  # ranks taking part in this stage
    steps: int  # latency-bound steps (alpha each)
    step_latency_s: float
    bytes_per_gpu: float  # bytes each GPU sends in this stage
    transfer_s: float  # time the bytes take on the link(s)
    protocol: str = ""  # the link spec's protocol this stage uses ("" for a single alpha-beta link)
    base_latency_s: float = 0.0  # the protocol's once-per-call latency (NCCL's baseLat)
    buffer_s: float = 0.0  # buffer_bytes(p, n) / the protocol's buffer bandwidth (0 without one)

    @property
    def latency_s(self) -> float:
        return self.base_latency_s + self.steps * self.step_latency_s

    @property
    def time_s(self) -> float:
        return self.latency_s + self.transfer_s + self.buffer_s


@dataclass(frozen=True)
class CollectiveCost:
    collective: str
    algo: str
    size_bytes: int
    gpus: int
    nodes: int
    phases: tuple[Phase, ...]
    call_overhead_s: float = 0.0  # host time to issue one call (0: not modelled)

    @property
    def device_s(self) -> float:
        return sum(p.time_s for p in self.phases)

    @property
    def host_wait_s(self) -> float:
        """Time per call the GPUs wait for the host to issue the next call: max(0, H - device time)."""
        return max(0.0, self.call_overhead_s - self.device_s)

    @property
    def time_s(self) -> float:
        return self.device_s + self.host_wait_s

    @property
    def latency_s(self) -> float:
        return sum(p.latency_s for p in self.phases)

    @property
    def transfer_s(self) -> float:
        return sum(p.transfer_s for p in self.phases)

    @property
    def buffer_s(self) -> float:
        return sum(p.buffer_s for p in self.phases)

    @property
    def bytes_per_gpu(self) -> float:
        return sum(p.bytes_per_gpu for p in self.phases)

    @property
    def algbw_Bps(self) -> float:
        return self.size_bytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw_Bps(self) -> float:
        return self.algbw_Bps * busbw_factor(self.collective, self.gpus)


def ring_terms(collective: str, p: int, n: float) -> tuple[int, float]:
    """Ring (or pairwise / pipelined-chain) step count and bytes each GPU sends."""
    if p == 1:
        return 0, 0.0
    if collective == "all-reduce":
        return 2 * (p - 1), 2 * (p - 1) / p * n
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        return p - 1, (p - 1) / p * n
    if collective in ("broadcast", "reduce"):
        return p - 1, float(n)
    return 1, float(n)  # p2p


def buffer_bytes(p: int, n: float) -> float:
    """Bytes charged at a protocol's buffer bandwidth: the message plus one GPU's share of it, (1 + 1/p) n
    (an all-gather writes the n-byte output and reads its own n/p chunk, a reduce-scatter the reverse; the
    same form for all-reduce was chosen on reports/comm/h200-x4-graph and confirmed on two earlier runs)."""
    return (1 + 1 / p) * n if p > 1 else 0.0


def _phase(name: str, link: str, p: int, steps: int, sent: float, terms: LinkTerms, n: float = 0.0) -> Phase:
    """One stage over a message of n bytes; with protocols, the one of least
    base_p + steps x alpha_p + sent / B_p + buffer_bytes(p, n) / C_p (NCCL's choice; C_p: buffer bandwidth, if any)."""
    options = terms.protocols or (Protocol("", terms.bandwidth_Bps, terms.latency_s),)
    held = buffer_bytes(p, n)
    cost = lambda o: o.base_latency_s + steps * o.latency_s + sent / o.bandwidth_Bps + held * o.buffer_s_per_byte  # noqa: E731
    best = min(options, key=cost)
    return Phase(name, link, p, steps, best.latency_s, sent, sent / best.bandwidth_Bps, best.name, best.base_latency_s,
                 held * best.buffer_s_per_byte)


def _ring_phase(collective: str, p: int, n: float, terms: LinkTerms, name: str, link: str) -> Phase:
    steps, sent = ring_terms(collective, p, n)
    return _phase(name, link, p, steps, sent, terms, n)


def _flat_link(cluster: ClusterSpec, collective: str, nodes: int, per_node: int) -> tuple[LinkTerms, str]:
    """(figures, label) of a flat ring/tree over `nodes` nodes.

    Across nodes NCCL runs one ring per NIC ("rails"), so the per_node GPUs of a node cross the
    network in parallel: bandwidth min(B_intra, per_node * B_nic); each step waits for the slower link.
    """
    if nodes == 1:
        return cluster.intra.terms(collective), cluster.intra.name
    net = cluster.link(across_nodes=True)
    if per_node == 1:
        return net.terms(collective), net.name
    (intra_bw, intra_lat), (inter_bw, inter_lat) = cluster.intra.for_collective(collective), net.for_collective(collective)
    return LinkTerms(min(intra_bw, per_node * inter_bw), max(intra_lat, inter_lat)), "intra+inter (rails)"


def _all_to_all_multinode(cluster: ClusterSpec, p: int, nodes: int, g: int, n: float) -> Phase:
    """Pairwise all-to-all: (g-1)/p of the buffer over NVLink and (p-g)/p over the NIC, concurrently."""
    intra_bw, intra_lat = cluster.intra.for_collective("all-to-all")
    inter_bw, inter_lat = cluster.link(across_nodes=True).for_collective("all-to-all")
    intra_bytes, inter_bytes = (g - 1) / p * n, (p - g) / p * n
    transfer = max(intra_bytes / intra_bw, inter_bytes / inter_bw)
    return Phase("pairwise all-to-all", "intra+inter", p, p - 1, max(intra_lat, inter_lat),
                 intra_bytes + inter_bytes, transfer)


def _tree_phases(collective: str, p: int, n: float, terms: LinkTerms, link: str) -> tuple[Phase, ...]:
    depth = math.ceil(math.log2(p))
    factor = 2 if collective == "all-reduce" else 1
    return (_phase("double binary tree", link, p, factor * depth, factor * n, terms, n),)


def _hierarchical_phases(cluster: ClusterSpec, collective: str, n: float, nodes: int, g: int) -> tuple[Phase, ...]:
    net = cluster.link(across_nodes=True)
    intra_terms, inter_terms = cluster.intra.terms(collective), net.terms(collective)
    intra = lambda c, size, label: _ring_phase(c, g, size, intra_terms, label, cluster.intra.name)  # noqa: E731
    inter = lambda c, size, label: _ring_phase(c, nodes, size, inter_terms, label, net.name)  # noqa: E731
    phases: tuple[Phase, ...]
    if collective == "all-reduce":
        phases = (intra("reduce-scatter", n, "intra-node reduce-scatter"),
                  inter("all-reduce", n / g, f"inter-node all-reduce of n/{g}"),
                  intra("all-gather", n, "intra-node all-gather"))
    elif collective == "all-gather":
        phases = (inter("all-gather", n / g, f"inter-node all-gather of n/{g}"),
                  intra("all-gather", n, "intra-node all-gather"))
    elif collective == "reduce-scatter":
        phases = (intra("reduce-scatter", n, "intra-node reduce-scatter"),
                  inter("reduce-scatter", n / g, f"inter-node reduce-scatter of n/{g}"))
    elif collective == "broadcast":
        phases = (inter("broadcast", n, "inter-node broadcast"), intra("broadcast", n, "intra-node broadcast"))
    elif collective == "reduce":
        phases = (intra("reduce", n, "intra-node reduce"), inter("reduce", n, "inter-node reduce"))
    else:
        raise MlsysError(f"hierarchical is not defined for {collective}")
    return tuple(ph for ph in phases if ph.gpus > 1)


def _check_layout(collective: str, gpus: int, nodes: int, cluster: ClusterSpec) -> int:
    busbw_factor(collective, max(gpus, 2))  # validates the name
    require(gpus >= 2, f"{collective} needs at least 2 GPUs, got {gpus}")
    require(nodes >= 1, f"nodes must be at least 1, got {nodes}")
    require(gpus % nodes == 0, f"{gpus} GPUs do not split evenly over {nodes} nodes")
    per_node = gpus // nodes
    word = cluster.domain_word  # a node, or an NVLink domain of several nodes (its GPUs share the intra link)
    require(per_node <= cluster.scale_up_gpus,
            f"{per_node} GPUs per {word}, but a {cluster.name} {word} has {cluster.scale_up_gpus}")
    return per_node


def collective_cost(collective: str, size_bytes: int, gpus: int, cluster: ClusterSpec | str,
                    nodes: int = 1, algo: str = "ring") -> CollectiveCost:
    """Alpha-beta time of one collective of `size_bytes` over `gpus` GPUs spread evenly on `nodes` nodes."""
    cluster = load_cluster(cluster)
    require(size_bytes > 0, f"size must be positive, got {size_bytes}")
    require(algo in ALGORITHMS, f"unknown algorithm {algo!r} (use one of: {', '.join(ALGORITHMS)})")
    g = _check_layout(collective, gpus, nodes, cluster)
    if algo == "auto":
        candidates = [a for a in ("ring", "tree", "hierarchical") if _applies(a, collective, nodes)]
        costs = [collective_cost(collective, size_bytes, gpus, cluster, nodes, a) for a in candidates]
        return min(costs, key=lambda c: c.time_s)
    require(_applies(algo, collective, nodes) or algo == "hierarchical",
            f"{algo} is defined for {', '.join(TREE_COLLECTIVES)}, not {collective}")
    n = float(size_bytes)
    if collective == "all-to-all" and nodes > 1:
        phases: tuple[Phase, ...] = (_all_to_all_multinode(cluster, gpus, nodes, g, n),)
    elif algo == "hierarchical" and nodes > 1 and collective != "p2p":
        phases = _hierarchical_phases(cluster, collective, n, nodes, g)
    else:
        terms, label = _flat_link(cluster, collective, nodes, g)
        if algo == "tree":
            phases = _tree_phases(collective, gpus, n, terms, label)
        else:
            name = {"all-to-all": "pairwise all-to-all", "p2p": "send/recv"}.get(collective, f"ring {collective}")
            phases = (_ring_phase(collective, gpus, n, terms, name, label),)
    return CollectiveCost(collective, algo, int(size_bytes), gpus, nodes, phases, _call_overhead(cluster, collective, nodes))


def _call_overhead(cluster: ClusterSpec, collective: str, nodes: int) -> float:
    """Host time to issue one call: the largest any link class used by the call specifies."""
    links = (cluster.intra,) if nodes == 1 else (cluster.intra, cluster.link(across_nodes=True))
    return max(link.terms(collective).call_overhead_s for link in links)


def _applies(algo: str, collective: str, nodes: int) -> bool:
    if algo == "tree":
        return collective in TREE_COLLECTIVES
    if algo == "hierarchical":
        return nodes > 1 and collective not in ("p2p", "all-to-all")
    return True
