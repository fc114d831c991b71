"""A calibration of the links, not of one GPU count: the shared fit that `mlsys bench comm --model shared` writes.

Per row (collective c on p GPUs, message of n bytes as nccl-tests counts it; sent = bytes one GPU sends,
mlsyscalc.calc.comm.collectives.ring_terms):

    device time  = f_c + sent(c, p, n) / B_g + (1 + 1/p) n / C_g
    time per call = max(H_c, device time)          (H_c: host time to issue one call; left out for graph rows)

f_c   a per-call floor of collective c (launch, synchronisation): not per ring step -- measured small-message
      times do not grow with the step count from 2 to 4 GPUs (reports/comm/h200-x4-same-host)
B_g   the link bandwidth, shared by the collectives of group g (all-reduce, all-gather, reduce-scatter share one)
C_g   a buffer bandwidth, shared by group g: the message plus one GPU's share of it, (1 + 1/p) n bytes, at
      every GPU whatever the ring length (comm_collectives.buffer_bytes: an all-gather writes n and reads its
      n/p chunk, a reduce-scatter the reverse; with n alone, all-gather and reduce-scatter came out 10-15% slow
      at 512 MiB-1 GiB on 4 GPUs in three runs, reports/comm/h200-x4-graph/SUMMARY.md)
H_c   the host floor: calls issued back to back from Python overlap the host's work with the GPU's, so the
      stream runs at the slower of the two

At one GPU count sent / n is fixed for one collective, so B and C of a lone collective cannot be told apart;
all-reduce sends 2(p-1)/p n a GPU and all-gather / reduce-scatter (p-1)/p n, over the same buffer bytes, so a
group with two such collectives separates them from one GPU count. A group whose rows have one ratio of
sent to buffer bytes gets no C.
The spec carries each collective as one protocol (base latency f_c, no per-step latency, bandwidth B_g,
buffer bandwidth C_g) with call overhead H_c, so `collective_cost` predicts any GPU count of the node.
Least squares on the relative error (scipy.optimize.least_squares, every parameter >= 0, fixed starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..calc.comm.collectives import buffer_bytes, ring_terms
from ..errors import MlsysError
from ..specs.cluster import ClusterSpec, Link, LinkTerms, Protocol

GROUPS = {"ring": ("all-reduce", "all-gather", "reduce-scatter"), "all-to-all": ("all-to-all",),
          "broadcast": ("broadcast",), "reduce": ("reduce",), "p2p": ("p2p",)}
GROUP_OF = {c: g for g, members in GROUPS.items() for c in members}
START_HOST_S = (20e-6, 40e-6, 80e-6)  # starts of H; f starts at 20 us, B at 350 GB/s, C at 2000 GB/s


@dataclass(frozen=True)
class SharedFit:
    """Fitted parameters (seconds, bytes per second) and what they were fitted on."""

    floor_s: dict[str, float]
    bandwidth_Bps: dict[str, float]  # by group
    buffer_Bps: dict[str, float]  # by group; absent: no buffer term
    host_s: dict[str, float] = field(default_factory=dict)  # empty: fitted without a host floor (graph rows)
    key: str = "time_s"
    rows: int = 0


class _Layout:
    """Column order of the parameter vector: f per collective, 1/B per group, 1/C per buffered group, H."""

    def __init__(self, rows: list[dict[str, Any]], host: bool):
        present = {r["collective"] for r in rows}
        self.coll = [c for members in GROUPS.values() for c in members if c in present]
        self.groups = [g for g in GROUPS if any(c in present for c in GROUPS[g])]
        ratios = {g: {round(ring_terms(r["collective"], r["gpus"], 1.0)[1] / buffer_bytes(r["gpus"], 1.0), 9)
                      for r in rows if GROUP_OF[r["collective"]] == g} for g in self.groups}
        self.buffered = [g for g in self.groups if len(ratios[g]) > 1]
        self.host = host
        k, m, b = len(self.coll), len(self.groups), len(self.buffered)
        self.size = k + m + b + (k if host else 0)
        c_idx, g_idx = {c: i for i, c in enumerate(self.coll)}, {g: k + i for i, g in enumerate(self.groups)}
        b_idx = {g: k + m + i for i, g in enumerate(self.buffered)}
        self.floor_col = np.array([c_idx[r["collective"]] for r in rows])
        self.link_col = np.array([g_idx[GROUP_OF[r["collective"]]] for r in rows])
        self.buf_col = np.array([b_idx.get(GROUP_OF[r["collective"]], -1) for r in rows])
        self.host_col = self.floor_col + k + m + b
        self.sent = np.array([ring_terms(r["collective"], r["gpus"], float(r["size_bytes"]))[1] for r in rows])
        self.n = np.array([buffer_bytes(r["gpus"], float(r["size_bytes"])) for r in rows])

    def device(self, x: np.ndarray) -> np.ndarray:
        buf = np.where(self.buf_col >= 0, x[np.maximum(self.buf_col, 0)], 0.0)
        return x[self.floor_col] + self.sent * x[self.link_col] + self.n * buf

    def time(self, x: np.ndarray) -> np.ndarray:
        return np.maximum(x[self.host_col], self.device(x)) if self.host else self.device(x)

    def start(self, host_s: float) -> np.ndarray:
        k, m, b = len(self.coll), len(self.groups), len(self.buffered)
        return np.array([20e-6] * k + [1 / 350e9] * m + [1 / 2000e9] * b + ([host_s] * k if self.host else []))

    def unpack(self, x: np.ndarray, key: str, rows: int) -> SharedFit:
        k, m, b = len(self.coll), len(self.groups), len(self.buffered)
        inverse = lambda v: 1 / v if v > 0 else float("inf")  # noqa: E731
        return SharedFit(floor_s=dict(zip(self.coll, map(float, x[:k]))),
                         bandwidth_Bps={g: inverse(float(v)) for g, v in zip(self.groups, x[k:k + m])},
                         buffer_Bps={g: inverse(float(v)) for g, v in zip(self.buffered, x[k + m:k + m + b])},
                         host_s=dict(zip(self.coll, map(float, x[k + m + b:]))) if self.host else {},
                         key=key, rows=rows)


def fit_shared(rows: list[dict[str, Any]], key: str = "time_s", host: bool = True, min_size: int = 0) -> SharedFit:
    """Least squares in relative error over the rows of at least min_size bytes that have `key` (one or more
    GPU counts). With the host floor, fit every size: the small ones fix H."""
    from scipy.optimize import least_squares

    rows = [r for r in rows if r.get("ok") and r.get(key) and r.get("nodes", 1) == 1 and r["collective"] in GROUP_OF
            and r["size_bytes"] >= min_size]
    if not rows:
        raise MlsysError(f"no correct single-node rows with {key} to fit")
    layout = _Layout(rows, host)
    t = np.array([r[key] for r in rows])
    best = None
    for host_s in START_HOST_S if host else START_HOST_S[:1]:
        scale = layout.start(host_s)
        res = least_squares(lambda z: layout.time(z * scale) / t - 1, np.ones(layout.size), bounds=(0, np.inf),
                            max_nfev=4000)
        if best is None or res.cost < best[0]:
            best = (res.cost, res.x * scale)
    assert best is not None  # START_HOST_S is never empty
    return layout.unpack(best[1], key, len(rows))


def shared_cluster(fit: SharedFit, name: str, gpus_per_node: int, link: str, source: tuple[str, ...] = (),
                   notes: str = "") -> ClusterSpec:
    """A measured cluster spec whose per-collective entries are the shared fit (one protocol each)."""
    per: dict[str, LinkTerms] = {}
    for c, floor in fit.floor_s.items():
        g = GROUP_OF[c]
        protocol = Protocol("shared", fit.bandwidth_Bps[g], 0.0, floor, fit.buffer_Bps.get(g, 0.0))
        per[c] = LinkTerms(fit.bandwidth_Bps[g], 0.0, (protocol,), fit.host_s.get(c, 0.0))
    ring = fit.bandwidth_Bps.get("ring", next(iter(fit.bandwidth_Bps.values())))
    return ClusterSpec(name=name, gpu="", gpus_per_node=gpus_per_node, intra=Link(link, ring, 0.0, per), inter=None,
                       source=source, notes=notes, measured=True)
