"""The layouts `plan` searches: TP x PP x DP x CP x EP x VP x SP x micro-batch x ZeRO x recompute.

Enumeration as Calculon does it (Isaev et al. 2023, "Calculon: a methodology and tool for high-level
co-design of systems and large language models", section 4: every divisor split of the GPUs, then
the execution options), kept to layouts that obey the rules of `TrainStepOptions` (each candidate
is checked by `check_layout`; the tensor-parallel widths once per tp):

- tp: divisors of the GPUs per node (tensor parallelism within a node) that the model's heads,
  KV heads and split widths allow;
- pp and vp (vp > 1 needs pp > 1 and pp | m) with a pipeline split of the layers (`pipeline_splits`): the
  even split where pp x vp divides the layers, and Megatron-LM's uneven ones near it, so that pp need not
  divide the layers (`--even-splits-only`: the even split alone);
- cp: powers of two up to `max_cp` with seq % (2 cp) == 0; dp = gpus / (tp pp cp);
- ep and etp (MoE models; otherwise ep 1 and etp = tp), as Megatron-Core folds the routed experts into each
  pipeline stage's tp x cp x dp ranks (calc.parallel.expert_grid): ep over divisors of the routed experts, etp 1 or
  tp (Megatron-Core's recommendation for fine-grained experts, megatron/core/transformer/moe/README.md, and
  its default; `--fix etp=N` searches any divisor of the GPUs per node), with etp x ep dividing tp x cp x dp;
  each (ep, etp) then passes the folding rules (expert widths % etp, expert biases only with etp 1, SP with
  tp > 1) in `check_layout`;
- micro-batch: divisors of global batch / dp up to `max_micro_batch`;
- sp on with tp > 1: sequence parallelism moves the same bytes as the all-reduces it replaces and
  shrinks activations and the norms' work by tp (Korthikanti et al. 2022, section 4.2.2), so a
  layout without it is never better here (`--fix sp=off` searches those instead);
- ZeRO 0-3, recompute none / selective / full.

`--fix AXIS=VALUE` pins an axis; pinning any of Megatron-LM's four split options (the `layout` keys
`decoder_first_pipeline_num_layers`, `decoder_last_pipeline_num_layers`,
`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`) pins the whole split:
the options given, the others unset.

Uneven splits (calc.parallel.pipeline_split has Megatron-LM's rules), per (pp, vp), each kept once per distinct
assignment of layers to chunks (the first of equal ones in this order, so vp = 1's account-for splits
are named as the papers name them):

- account for the embedding, the loss, or both (the first / last stage one decoder layer fewer):
  how Llama 3 405B (126 layers, 16 stages) and BLOOM 176B (70 layers, 12 stages) were split;
- first / last stage sizes (multiples of vp: every model chunk of a stage holds the same layers): the
  middle stages hold n layers each and each end n - vp, n or n + vp (one layer fewer or more in each of
  its chunks), not both n; with pp = 2 the two stages differ by at most 2 vp. These are the smallest
  departures from an even split that Megatron-LM can express: a lighter first stage holds fewer of the
  pp micro-batches in flight (its activation peak), a lighter last stage offsets the head and the loss,
  and a heavier end takes the layers an even split cannot place. Only where a chunk holds at least two
  layers (n >= 2 vp; pp = 2: each stage >= 2 vp), so that one layer is at most half a chunk.
  With pp > 2 also the split whose middle stages hold the fewest layers that leave the ends no heavier
  (n = ceil(layers / (pp vp)) vp, n >= 2 vp) and whose ends share the rest as evenly as whole chunks
  allow (either order): the layers a near-even split cannot place (61 on 16 stages: 3 + 14 x 4 + 2).

With `--framework torch` (PyTorch's own parallelism: DDP, FSDP2, DTensor tensor and sequence
parallelism, torch.distributed.pipelining, as `mlsys train --framework torch` prices it) the layouts
torch cannot run are left out (`TORCH_EXCLUDED`, also in the JSON as `excluded`):

- ep > 1: torch.distributed has no expert parallelism (routed experts stay whole on every rank;
  torchtitan builds EP on its own all-to-all code); nor an expert tensor-parallel group of its own: etp = tp;
- ZeRO 1: torch shards optimizer states only with the gradients, as FSDP2 does (`fully_shard`: ZeRO-3, or
  ZeRO-2 with reshard_after_forward=False, FSDP1's SHARD_GRAD_OP; calc.memory.schedule.fsdp_sharded); ZeRO-0
  is DDP. The torch host costs were fitted on DDP and ZeRO-3 steps; ZeRO-2 is priced with ZeRO-3's per-layer
  FSDP2 hook cost and checked on measured steps (reports/train/README.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Iterator

from ...errors import MlsysError, require
from ...specs.cluster import ClusterSpec
from ...specs.model import ModelSpec
from ..parallel.pipeline_split import EVEN, PipelineSplit, chunk_layers
from ..parallel.tensor_parallel import check_tp
from ..train.options import RECOMPUTE, TrainStepOptions

INT_AXES = ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "micro_batch", "zero")
# Megatron-LM's split options as the `layout` JSON names them -> PipelineSplit's field
SPLIT_AXES = {"decoder_first_pipeline_num_layers": "first", "decoder_last_pipeline_num_layers": "last",
              "account_for_embedding_in_pipeline_split": "embedding", "account_for_loss_in_pipeline_split": "loss"}
AXES = INT_AXES + ("sp", "recompute", *SPLIT_AXES)
ACCOUNT_FOR = (PipelineSplit(embedding=True), PipelineSplit(loss=True), PipelineSplit(embedding=True, loss=True))
# axis -> (values torch cannot run, why): `plan --framework torch` leaves these layouts out
TORCH_EXCLUDED = {
    "ep": ((lambda v: v > 1), "ep > 1", "torch.distributed has no expert parallelism (torchtitan builds it on its "
                                        "own all-to-all)"),
    "zero": ((lambda v: v == 1), "1", "torch shards optimizer states only with the gradients and parameters, as "
                                      "FSDP2 (fully_shard: ZeRO-3, or ZeRO-2 with reshard_after_forward=False)"),
}
TORCH_ETP = "torch.distributed has no expert tensor-parallel group: the routed experts shard over the TP ranks"
# Caps on the search (docs/cli.md, "Caps on loops"): each candidate shown is re-timed by `train_step`, and
# micro-batch sizes are divisors of global batch / dp up to --max-micro-batch
MAX_TOP = 100  # --top
MAX_MICRO_BATCH = 4096  # --max-micro-batch
_BOOL = {"true": True, "on": True, "1": True, "yes": True, "false": False, "off": False, "0": False, "no": False}


# the fields a plan shares with the train step of each candidate: the job and its pricing, not its layout
JOB_FIELDS = ("gpus", "seq", "global_batch", "dtype", "overlap", "capacity_factor", "reserve", "attention", "framework",
              "host_costs", "host_source", "fp8_recipe", "fp8_params", "comm_sms", "clocks", "loss", "dropout",
              "clip_grad", "grad_reduce")


@dataclass(frozen=True)
class PlanOptions:
    gpus: int = 1
    seq: int = 2048
    global_batch: int = 1
    dtype: str = TrainStepOptions.dtype
    top: int = 5  # candidates returned
    fix: tuple[tuple[str, int | bool | str], ...] = ()  # pinned axes
    overlap: tuple[str, ...] = TrainStepOptions.overlap
    capacity_factor: float = TrainStepOptions.capacity_factor
    reserve: str = TrainStepOptions.reserve
    attention: str = TrainStepOptions.attention
    max_micro_batch: int = 16
    max_cp: int = 16
    framework: str = TrainStepOptions.framework  # whose memory and host time are priced (calc.train.host)
    host_costs: tuple[tuple[str, float], ...] = TrainStepOptions.host_costs  # a calibration's torch_host
    host_source: str = TrainStepOptions.host_source  # where host_costs come from
    fp8_recipe: str = TrainStepOptions.fp8_recipe  # --dtype fp8: Transformer Engine's scaling (calc.precision.fp8)
    fp8_params: bool = TrainStepOptions.fp8_params  # --dtype fp8: FP8 weights (Megatron-LM --fp8-param-gather)
    even_splits_only: bool = False  # search the even pipeline split alone (no uneven stages)
    comm_sms: int = TrainStepOptions.comm_sms  # SMs NCCL holds while overlapped traffic runs (calc.comm.exposed)
    clocks: str = TrainStepOptions.clocks  # sustained (a long run's steady state) or burst (calc.roofline.steady)
    loss: str = TrainStepOptions.loss  # the fused list's loss kernels (calc.roofline.head)
    dropout: float = TrainStepOptions.dropout  # hidden dropout before each residual add
    grad_reduce: str | None = TrainStepOptions.grad_reduce  # the DP gradient reduction's dtype (None: the framework's)
    clip_grad: bool = TrainStepOptions.clip_grad  # gradient norm and clipping before the optimizer
    # the top K: one candidate per (tp, pp, dp, cp, ep, micro-batch), the best of its variants (calc.plan.result.fold),
    # or every layout (--all-variants)
    all_variants: bool = False

    def base(self) -> TrainStepOptions:
        """The train options every candidate shares."""
        return TrainStepOptions(**{name: getattr(self, name) for name in JOB_FIELDS})

    @classmethod
    def for_job(cls, opts: TrainStepOptions, **search: Any) -> "PlanOptions":
        """The search for the job of a train step's options (its JOB_FIELDS), with `search`'s settings."""
        return cls(**{name: getattr(opts, name) for name in JOB_FIELDS}, **search)

    def validate(self) -> None:
        for name in ("gpus", "seq", "global_batch", "top", "max_micro_batch", "max_cp"):
            require(getattr(self, name) >= 1, f"--{name.replace('_', '-')} must be a positive integer")
        fixed = dict(self.fix)
        require(not (fixed.get("sp") is True and fixed.get("tp") == 1),
                "--fix sp=on and --fix tp=1 conflict: sequence parallelism splits over tp > 1")
        for name, cap in (("top", MAX_TOP), ("max_micro_batch", MAX_MICRO_BATCH)):
            require(getattr(self, name) <= cap, f"--{name.replace('_', '-')}: {getattr(self, name):,} is above the cap of "
                                                f"{cap:,} (docs/cli.md)")
        self.base().validate_scalars()
        for axis, value in self.fix:
            if axis in self.rules():
                test, _, reason = self.rules()[axis]
                require(not test(value), f"--fix {axis}={value} with --framework torch: {reason}")

    def rules(self) -> dict:
        """The axes whose values this framework cannot run (TORCH_EXCLUDED with torch, none with megatron)."""
        return TORCH_EXCLUDED if self.framework == "torch" else {}

    def excluded(self) -> list[dict[str, str]]:
        """What the search leaves out for this framework, and why (the `excluded` JSON key)."""
        out = [{"axis": axis, "values": values, "reason": reason} for axis, (_, values, reason) in self.rules().items()]
        if self.framework == "torch":  # relative to tp, so not a TORCH_EXCLUDED value
            out.append({"axis": "etp", "values": "other than tp", "reason": TORCH_ETP})
        return out

    def runs(self, axis: str, value: int) -> bool:
        """Whether the framework can run this value of the axis."""
        return axis not in self.rules() or not self.rules()[axis][0](value)


def parse_fix(items: tuple[str, ...]) -> tuple[tuple[str, int | bool | str], ...]:
    """`tp=8`, `sp=off`, `recompute=selective`, `micro-batch=1` -> ((axis, value), ...)."""
    out: list[tuple[str, int | bool | str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        axis = key.strip().replace("-", "_")
        require(bool(sep) and axis in AXES, f"--fix {item!r}: expected AXIS=VALUE with AXIS one of {', '.join(AXES)}")
        require(axis not in dict(out), f"--fix {item!r}: {axis} is fixed twice (--fix {axis}={dict(out).get(axis)})")
        value = value.strip().lower()
        if axis == "sp" or SPLIT_AXES.get(axis) in ("embedding", "loss"):
            require(value in _BOOL, f"--fix {item!r}: {axis} is on or off")
            out.append((axis, _BOOL[value]))
        elif axis == "recompute":
            require(value in RECOMPUTE, f"--fix {item!r}: recompute is one of {', '.join(RECOMPUTE)}")
            out.append((axis, value))
        else:
            require(value.isascii() and value.isdigit() and int(value) >= (0 if axis == "zero" else 1),
                    f"--fix {item!r}: not a valid count")
            out.append((axis, int(value)))
    return tuple(out)


def _divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of n up to limit (default n), in increasing order."""
    top = n if limit is None else min(n, limit)
    if top <= math.isqrt(n):  # a short walk up to the limit
        return [d for d in range(1, top + 1) if n % d == 0]
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]  # else pairs (d, n / d) up to sqrt(n)
    return sorted({x for d in small for x in (d, n // d) if x <= top})


def _tp_values(spec: ModelSpec, cluster: ClusterSpec, gpus: int) -> list[int]:
    out = []
    for tp in _divisors(cluster.scale_up_gpus):  # TP inside the NVLink domain (a node, or a 72-GPU rack)
        if gpus % tp:
            continue
        try:
            check_tp(spec, tp, experts=1)  # heads and dense widths; the experts' by etp: check_layout
        except MlsysError:
            continue
        out.append(tp)
    return out


def _allowed(fix: dict, axis: str, values: list) -> list:
    return [v for v in values if v == fix[axis]] if axis in fix else values


def _end_splits(layers: int, pp: int, vp: int) -> list[PipelineSplit]:
    """First / last stage sizes near an even split (module docstring): middle stages of n >= 2 vp layers (two
    or more a model chunk), each end within vp layers (one a chunk) of n; with pp = 2 the stages differ by
    at most 2 vp, each of them 2 vp layers or more; and the fullest middles with the ends sharing the rest."""
    if pp == 2:
        return [PipelineSplit(first=f) for f in range(2 * vp, layers - 2 * vp + 1, vp)
                if 0 < abs(2 * f - layers) <= 2 * vp]
    out = []
    for n in range(max(2 * vp, (layers - 2 * vp) // pp // vp * vp), (layers + 2 * vp) // pp + 1, vp):
        rest = layers - (pp - 2) * n  # the two ends' layers
        for first in (n - vp, n, n + vp):
            last = rest - first
            if first >= 1 and abs(last - n) <= vp and last >= 1 and (first, last) != (n, n):
                out.append(PipelineSplit(first=None if first == n else first, last=None if last == n else last))
    n = -(-layers // (pp * vp)) * vp  # the fewest layers a middle stage can hold with the ends no heavier
    rest = layers - (pp - 2) * n
    half = rest // 2 // vp * vp
    if n >= 2 * vp and half >= vp:  # the ends share the rest as evenly as whole chunks allow
        out += [PipelineSplit(first=half, last=rest - half), PipelineSplit(first=rest - half, last=half)]
    return out


def pipeline_splits(layers: int, pp: int, vp: int, opts: PlanOptions) -> tuple[PipelineSplit, ...]:
    """The splits searched for (pp, vp) (module docstring), those Megatron-LM accepts, one per distinct
    assignment of layers to model chunks; a pinned split alone when --fix names a split option."""
    pinned: dict[str, Any] = {SPLIT_AXES[k]: v for k, v in opts.fix if k in SPLIT_AXES}
    if pinned:
        tried = [PipelineSplit(**pinned)]
    else:
        tried = [EVEN] + ([] if opts.even_splits_only or pp == 1 else [*ACCOUNT_FOR, *_end_splits(layers, pp, vp)])
    seen: dict[tuple, PipelineSplit] = {}
    for split in tried:
        try:
            seen.setdefault(chunk_layers(layers, pp, vp, split), split)
        except MlsysError:
            continue
    return tuple(seen.values())


def structures(spec: ModelSpec, cluster: ClusterSpec, opts: PlanOptions) -> Iterator[TrainStepOptions]:
    """Every valid layout with ZeRO 0 and no recomputation (the execution options multiply these); the
    layouts of one structure with other pipeline splits follow it."""
    fix, L = dict(opts.fix), spec.num_layers
    base = {f.name: getattr(opts.base(), f.name) for f in fields(TrainStepOptions) if f.init}
    splits = {(pp, vp): pipeline_splits(L, pp, vp, opts)
              for pp in range(1, L + 1) if opts.gpus % pp == 0 for vp in (range(1, (L + 2) // pp + 1) if pp > 1 else [1])}
    split_pps = sorted({pp for (pp, _), found in splits.items() if found})
    tps = [1] if base["loss"] == "bf16" and base["vocab_parallel"] else _tp_values(spec, cluster, opts.gpus)
    for tp in _allowed(fix, "tp", tps):  # --loss bf16 is priced with the whole vocabulary on a rank (TrainStepOptions)
        pps = [p for p in split_pps if opts.gpus % (tp * p) == 0]
        for pp in _allowed(fix, "pp", pps):
            cps = [c for c in _divisors(opts.gpus // (tp * pp), opts.max_cp) if c & (c - 1) == 0]
            for cp in _allowed(fix, "cp", cps):
                dp = opts.gpus // (tp * pp * cp)
                if "dp" in fix and fix["dp"] != dp or opts.global_batch % dp:
                    continue
                for ep, etp in _expert_grids(fix, opts, spec, cluster, tp, tp * cp * dp):
                    for mb in _allowed(fix, "micro_batch", _divisors(opts.global_batch // dp, opts.max_micro_batch)):
                        vps = [v for v in range(1, (L + 2) // pp + 1) if splits[pp, v]] if pp > 1 else [1]
                        for vp in _allowed(fix, "vp", vps):
                            first, *others = splits[pp, vp]
                            for sp in _allowed(fix, "sp", [True, False] if "sp" in fix else [True]) if tp > 1 else [False]:
                                kw = {**base, "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "etp": etp,
                                      "micro_batch": mb, "vp": vp, "sp": sp, "pipeline_split": first}
                                cand = TrainStepOptions(**kw)
                                try:  # the split is the only rule that reads it (checked above)
                                    cand.check_layout(spec, cluster)
                                except MlsysError:
                                    continue
                                yield cand
                                yield from (TrainStepOptions(**{**kw, "pipeline_split": s}) for s in others)


def _expert_grids(fix: dict, opts: PlanOptions, spec: ModelSpec, cluster: ClusterSpec, tp: int,
                  stage: int) -> list[tuple[int, int | None]]:
    """(ep, etp) of the routed experts' grid over a stage's `stage` = tp x cp x dp ranks (Megatron-Core's folding,
    calc.parallel.expert_grid): ep dividing the experts, etp x ep dividing the stage; etp 1 or tp (Megatron-Core's
    recommendation for fine-grained experts, and its default), any divisor of the node's GPUs when pinned;
    torch: etp = tp. A dense model: ep 1, etp None (= tp)."""
    if spec.moe is None:
        return [(1, None)] if _allowed(fix, "ep", [1]) and "etp" not in fix else []
    eps = [e for e in _divisors(spec.moe.num_experts) if stage % e == 0 and opts.runs("ep", e)]
    etps = ([tp] if opts.framework == "torch" else
            _divisors(cluster.scale_up_gpus) if "etp" in fix else sorted({1, tp}))
    return [(ep, etp) for ep in _allowed(fix, "ep", eps) for etp in _allowed(fix, "etp", etps)
            if stage % (etp * ep) == 0]


def execution_options(opts: PlanOptions) -> list[tuple[int, str]]:
    """(zero, recompute) pairs searched for every layout."""
    fix = dict(opts.fix)
    zeros = [z for z in (0, 1, 2, 3) if opts.runs("zero", z)]
    return [(z, r) for z in _allowed(fix, "zero", zeros) for r in _allowed(fix, "recompute", list(RECOMPUTE))]
