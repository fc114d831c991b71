"""ClusterSpec: how the GPUs of a cluster are linked, read from model_specs/clusters/*.json.

Each link class (NVLink/PCIe inside a node, the NICs across nodes) has a per-GPU, per-direction
bandwidth and a per-step latency: the beta and alpha of the alpha-beta model
(Hockney 1994; Thakur, Rabenseifner & Gropp 2005). A file written by `mlsys bench comm --calibrate`
holds measured values instead (`"measured": true`), optionally per collective.

Optional, as NCCL's tuner models time (src/graph/tuning.cc: a latency and a bandwidth per protocol,
the fastest wins): `protocols`, each a per-step latency, a per-call base latency, a bandwidth and
optionally a buffer bandwidth (a cost per byte of the message plus one GPU's share of it), and
`call_overhead_us`, the host time to issue one call. Without them a link is the single alpha-beta pair.

A scale-up domain can be larger than a node: `nvlink_domain_gpus` is how many GPUs one `intra_node` link
class joins (GB200 NVL72: 72 GPUs on 18 trays of 4 through the rack's NVLink switches); without it the
domain is the node. Collectives inside a domain use the intra link, across domains the inter link
(docs/hardware.md, "Scale-up domains").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..errors import MlsysError, require
from ..readers import schema
from .lookup import all_names, find_named, load_spec_dir, read_json, suggest


# GPUs one node (one NVLink/PCIe domain) may hold: the largest NVLink domains announced hold 576 (NVL576).
# plan walks the divisors of it for TP, and every rank count below it is a loop (docs/cli.md, "Caps on loops").
MAX_GPUS_PER_NODE = 1024


@dataclass(frozen=True)
class Protocol:
    """One way NCCL moves data (LL, LL128, Simple; or a fitted regime): per-step latency and bandwidth."""

    name: str
    bandwidth_Bps: float  # per GPU per direction
    latency_s: float  # per algorithm step (NCCL's hwLat: grows with the ring's p - 1 steps)
    base_latency_s: float = 0.0  # once per call, whatever the GPU count (NCCL's baseLat)
    # per byte of (1 + 1/p) n, the message plus one GPU's share, whatever the ring length (0: none); fitted
    buffer_bandwidth_Bps: float = 0.0

    @property
    def buffer_s_per_byte(self) -> float:
        return 1.0 / self.buffer_bandwidth_Bps if self.buffer_bandwidth_Bps > 0 else 0.0


@dataclass(frozen=True)
class LinkTerms:
    """What the collective model needs from one link for one collective."""

    bandwidth_Bps: float
    latency_s: float
    protocols: tuple[Protocol, ...] = ()  # when present they replace (bandwidth, latency); fastest wins
    call_overhead_s: float = 0.0  # host time to issue one call (time per call >= this)


@dataclass(frozen=True)
class Link:
    """One link class: bandwidth per GPU per direction (B/s) and latency per algorithm step (s)."""

    name: str
    bandwidth_Bps: float
    latency_s: float
    # Measured per-collective figures that replace the link-wide ones.
    per_collective: Mapping[str, LinkTerms] = field(default_factory=dict)
    protocols: tuple[Protocol, ...] = ()
    call_overhead_s: float = 0.0
    line_rate_Bps: float = 0.0  # the datasheet rate when bandwidth_Bps is an achievable figure (information)

    def __post_init__(self) -> None:  # a (bandwidth_Bps, latency_s) pair is a single alpha-beta entry
        per = {k: v if isinstance(v, LinkTerms) else LinkTerms(*v) for k, v in self.per_collective.items()}
        object.__setattr__(self, "per_collective", per)

    def terms(self, collective: str) -> LinkTerms:
        """The figures for one collective: a measured entry, else the link's."""
        default = LinkTerms(self.bandwidth_Bps, self.latency_s, self.protocols, self.call_overhead_s)
        return self.per_collective.get(collective, default)

    def for_collective(self, collective: str) -> tuple[float, float]:
        """(bandwidth_Bps, latency_s) of the single alpha-beta pair for one collective."""
        terms = self.terms(collective)
        return terms.bandwidth_Bps, terms.latency_s

    @property
    def beta_s_per_byte(self) -> float:
        return 1.0 / self.bandwidth_Bps


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpu: str  # a GPU name for `mlsys gpus` (information; the comm model needs only the links)
    gpus_per_node: int
    intra: Link  # NVLink / PCIe between GPUs of one node
    inter: Link | None  # NICs between nodes; None for a single-node box
    source: tuple[str, ...] = ()
    notes: str = ""
    aliases: tuple[str, ...] = ()
    measured: bool = False  # True when the links come from a fit to NCCL measurements
    domain_gpus: int = 0  # GPUs one intra link class joins (an NVLink domain of several nodes); 0: the node

    @property
    def scale_up_gpus(self) -> int:
        """GPUs of one scale-up (NVLink) domain: the intra link joins them, the inter link joins domains."""
        return self.domain_gpus or self.gpus_per_node

    @property
    def domain_word(self) -> str:
        """What the rules call one scale-up domain: "node", or "NVLink domain" when it holds several nodes."""
        return "NVLink domain" if self.scale_up_gpus > self.gpus_per_node else "node"

    def for_job(self, gpus: int, domain: int | None = None) -> "ClusterSpec":
        """The cluster as a job of `gpus` GPUs uses it, the placement rule across scale-up domains: a job within one
        domain takes its GPUs from it; a job spanning domains takes the same number from each, `domain` when given,
        else the most that divides the job in whole nodes, up to the domain (GB200 NVL72: 256 GPUs are 4 racks of
        64, 576 are 8 of 72). The copy's domain_gpus is that number; the links are the same."""
        full = self.scale_up_gpus
        if domain is not None:
            require(isinstance(domain, int) and self.gpus_per_node <= domain <= full and domain % self.gpus_per_node == 0,
                    f"--nvlink-domain {domain}: a multiple of the {self.gpus_per_node} GPUs of a {self.name} node, at most "
                    f"its {full}-GPU {self.domain_word}")
            used = domain
        elif gpus <= full or full == self.gpus_per_node:
            return self
        else:
            fits = [d for d in range(self.gpus_per_node, full + 1, self.gpus_per_node) if gpus % d == 0]
            require(bool(fits), f"rule whole nodes: {gpus} GPUs do not fill whole {self.gpus_per_node}-GPU nodes of "
                                f"{self.name}")
            used = max(fits)
        return self if used == full else replace(self, domain_gpus=used)

    def link(self, across_nodes: bool) -> Link:
        if not across_nodes:
            return self.intra
        if self.inter is None:
            raise MlsysError(f"cluster {self.name} has no inter-node link")
        return self.inter

    def with_links(self, *, bandwidth_GBps: float | None = None, latency_us: float | None = None,
                   inter_bandwidth_GBps: float | None = None, inter_latency_us: float | None = None) -> "ClusterSpec":
        """A copy with link figures replaced (what-if); measured per-collective values and protocols are dropped."""
        intra = _relink(self.intra, bandwidth_GBps, latency_us)
        inter = self.inter
        if inter_bandwidth_GBps is not None or inter_latency_us is not None:
            base = inter or Link("inter-node", self.intra.bandwidth_Bps, self.intra.latency_s)
            inter = _relink(base, inter_bandwidth_GBps, inter_latency_us)
        return replace(self, intra=intra, inter=inter)

    def to_dict(self) -> dict[str, Any]:
        """The JSON schema of model_specs/clusters/*.json (what `--calibrate` writes)."""
        data: dict[str, Any] = {"name": self.name, "aliases": list(self.aliases), "gpu": self.gpu,
                                "gpus_per_node": self.gpus_per_node, "measured": self.measured,
                                "intra_node": _link_dict(self.intra)}
        if self.domain_gpus:
            data["nvlink_domain_gpus"] = self.domain_gpus
        if self.inter is not None:
            data["inter_node"] = _link_dict(self.inter)
        data.update(source=list(self.source), notes=self.notes)
        return data


def _relink(link: Link, bandwidth_GBps: float | None, latency_us: float | None) -> Link:
    if bandwidth_GBps is None and latency_us is None:
        return link
    require(bandwidth_GBps is None or bandwidth_GBps > 0, f"bandwidth must be positive, got {bandwidth_GBps}")
    require(latency_us is None or latency_us >= 0, f"latency must be zero or more, got {latency_us}")
    return Link(
        name=link.name + " (overridden)",
        bandwidth_Bps=link.bandwidth_Bps if bandwidth_GBps is None else bandwidth_GBps * 1e9,
        latency_s=link.latency_s if latency_us is None else latency_us * 1e-6,
    )


def _terms_dict(terms: LinkTerms | Link, link: Link | None = None) -> dict[str, Any]:
    """JSON figures; a per-collective entry also states what would otherwise come from its `link`."""
    data: dict[str, Any] = {"bandwidth_GBps": terms.bandwidth_Bps / 1e9, "latency_us": terms.latency_s * 1e6}
    if terms.call_overhead_s or (link is not None and link.call_overhead_s):
        data["call_overhead_us"] = terms.call_overhead_s * 1e6
    if terms.protocols or (link is not None and link.protocols):
        data["protocols"] = [_protocol_dict(p) for p in terms.protocols]
    return data


def _protocol_dict(p: Protocol) -> dict[str, Any]:
    data = {"name": p.name, "bandwidth_GBps": p.bandwidth_Bps / 1e9, "latency_us": p.latency_s * 1e6}
    data |= {"base_latency_us": p.base_latency_s * 1e6} if p.base_latency_s else {}
    return data | ({"buffer_bandwidth_GBps": p.buffer_bandwidth_Bps / 1e9} if p.buffer_bandwidth_Bps else {})


def _link_dict(link: Link) -> dict[str, Any]:
    data: dict[str, Any] = {"link": link.name, **_terms_dict(link)}
    if link.line_rate_Bps:
        data["line_rate_GBps"] = link.line_rate_Bps / 1e9
    if link.per_collective:
        data["per_collective"] = {k: _terms_dict(v, link) for k, v in link.per_collective.items()}
    return data


def _terms_from_dict(data: Mapping[str, Any], where: str, default: LinkTerms | None = None) -> LinkTerms:
    """Figures from JSON; a per-collective entry takes what it leaves out from its link (`default`)."""
    def get(key: str, scale: float, fallback: float | None, above: float | None = None,
            minimum: float | None = None) -> float:
        value = schema.number(data, key, where, required=fallback is None, above=above, minimum=minimum)
        return fallback if value is None else value * scale  # type: ignore[return-value]

    base = default or LinkTerms(get("bandwidth_GBps", 1e9, None, above=0), get("latency_us", 1e-6, None, minimum=0))
    bandwidth = get("bandwidth_GBps", 1e9, base.bandwidth_Bps, above=0)
    latency = get("latency_us", 1e-6, base.latency_s, minimum=0)
    overhead = get("call_overhead_us", 1e-6, base.call_overhead_s, minimum=0)
    protocols = base.protocols if data.get("protocols") is None else tuple(
        _protocol(p, f"{where} protocols[{i}]") for i, p in enumerate(schema.sequence(data, "protocols", where)))
    return LinkTerms(bandwidth, latency, protocols, overhead)


def _protocol(data: Any, where: str) -> Protocol:
    if not isinstance(data, dict):
        raise MlsysError(f"{where}: a protocol must be a JSON object, got {data!r}")
    return Protocol(schema.string(data, "name", where), schema.number(data, "bandwidth_GBps", where, above=0) * 1e9,
                    schema.number(data, "latency_us", where, minimum=0) * 1e-6,
                    schema.number(data, "base_latency_us", where, required=False, default=0.0, minimum=0) * 1e-6,
                    schema.number(data, "buffer_bandwidth_GBps", where, required=False, default=0.0, minimum=0) * 1e9)


def _link_from_dict(data: Any, where: str) -> Link:
    if not isinstance(data, dict):
        raise MlsysError(f"{where}: a link must be a JSON object, got {data!r}")
    base = _terms_from_dict(data, where)
    per = {}
    for name, entry in schema.mapping(data, "per_collective", where).items():
        if not isinstance(entry, dict):
            raise MlsysError(f"{where} per_collective: key {name!r}: must be a JSON object, got {entry!r}")
        per[name] = _terms_from_dict(entry, f"{where} per_collective.{name}", base)
    line_rate = schema.number(data, "line_rate_GBps", where, required=False, default=0.0, minimum=0) * 1e9
    return Link(str(data.get("link", "")), base.bandwidth_Bps, base.latency_s, per, base.protocols,
                base.call_overhead_s, line_rate)


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key)
    items = [value] if isinstance(value, str) else schema.sequence(data, key, where)
    if not all(isinstance(x, str) for x in items):
        raise schema.fail(where, key, "must be a list of strings")
    return tuple(items)


def cluster_from_dict(data: Mapping[str, Any], where: str) -> ClusterSpec:
    """A ClusterSpec from the JSON of model_specs/clusters/*.json, every field checked: a bad one is
    "<where>: malformed cluster spec: <section>: key '<key>': <problem>"."""
    try:
        if not isinstance(data, dict):
            raise MlsysError("a cluster spec must be a JSON object")
        gpus_per_node = schema.integer(data, "gpus_per_node", "", maximum=MAX_GPUS_PER_NODE)
        domain = schema.integer(data, "nvlink_domain_gpus", "", required=False, default=0, minimum=0,
                                maximum=MAX_GPUS_PER_NODE)
        if domain and (domain < gpus_per_node or domain % gpus_per_node):
            raise schema.fail("", "nvlink_domain_gpus", f"{domain} must be a multiple of gpus_per_node {gpus_per_node}")
        inter = data.get("inter_node")
        return ClusterSpec(
            name=schema.string(data, "name", ""), gpu=schema.string(data, "gpu", "", required=False, default=""),
            gpus_per_node=gpus_per_node,
            intra=_link_from_dict(schema.mapping(data, "intra_node", "", required=True), "intra_node"),
            inter=None if inter is None else _link_from_dict(inter, "inter_node"),
            source=_strings(data, "source", ""), notes=str(data.get("notes", "")),
            aliases=_strings(data, "aliases", ""), measured=schema.boolean(data, "measured", ""), domain_gpus=domain,
        )
    except MlsysError as exc:
        raise MlsysError(f"{where}: malformed cluster spec: {exc}") from None


@lru_cache(maxsize=None)
def builtin_clusters() -> dict[str, ClusterSpec]:
    return load_spec_dir("clusters", cluster_from_dict, "cluster spec")


def load_cluster(ref: str | ClusterSpec) -> ClusterSpec:
    """A built-in cluster by name or alias (exact, case-insensitive), or a path to a cluster JSON."""
    if isinstance(ref, ClusterSpec):
        return ref
    spec = find_named(builtin_clusters(), ref)
    if spec is not None:
        return spec
    path = Path(str(ref)).expanduser()
    if path.is_file():
        return cluster_from_dict(read_json(path, "cluster spec"), str(path))
    names = all_names(builtin_clusters())
    raise MlsysError(f"unknown cluster {ref!r}: not a built-in name or alias, nor a JSON file{suggest(str(ref), names)}")
