"""Per-GPU memory of one training step: weights, gradients, optimizer states, activations and
temporaries at the step's peak, for every pipeline stage (the worst stage is the answer).

Model states follow ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054, section 3): mixed
precision AdamW keeps 2-byte weights and gradients plus fp32 master weights, momentum and
variance (2 + 2 + 12 = 16 bytes per parameter); ZeRO-1 shards the optimizer states over the
data-parallel ranks, ZeRO-2 the gradients too, ZeRO-3 the weights too (FSDP's full_shard and
shard_grad_op are ZeRO-3 and ZeRO-2). ZeRO-Offload (Ren et al. 2021) keeps master weights and
optimizer states in CPU memory.

Activations follow Korthikanti et al. 2022 (see `calc.counts.activations`); with pipeline
parallelism stage s holds min(pp - s, micro-batches) micro-batches under 1F1B (the first
stage min(pp, m), paper section 4.2.3), all of them under GPipe, and with vp model chunks the
interleaved schedule's chunk-forwards (`calc.memory.schedule`), each holding its own chunk's
layers (stages and chunks split evenly or as Megatron-LM's uneven options do,
`calc.parallel.pipeline_split`). Each stage's peak is the largest of its phases: the start of the step's
first backward (every saved activation and the loss's fp32 logits temporaries alive together;
gradients only if they exist then), a later backward (when they did not: all gradients, one
micro-batch fewer), the end of the backward on the rank holding the token embedding (model states
with all gradients and the embedding-sized gradients autograd holds there: `calc.memory.schedule`,
three blocks with a tied head in plain PyTorch) and the optimizer step (weights, all gradients and
optimizer states; no activations). Gradients are resident throughout with persistent buffers (`framework="megatron"`,
Megatron-LM and DeepSpeed); with PyTorch's `zero_grad(set_to_none=True)` (`framework="torch"`)
they are absent until the step's first backward (`calc.memory.schedule`, which also lists torch's other buffers).

FP8 training (`dtype="fp8"`, Transformer Engine): weights, gradients and the other activations stay
bf16; the inputs FP8 linears save are FP8 (`calc.counts.activations`), and each FP8 linear's weight has FP8
copies TE keeps across the micro-batches of a step (`calc.precision.fp8.fp8_weight_copies`): under
"weights", detail `fp8_weight_copies`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ...dtypes import dtype_name
from ...errors import MlsysError, divide, require
from ...specs.model import ModelSpec
from ...validate import check_gpus
from ..counts.activations import Saved, Split, item_bytes, layer_bytes, layer_saved
from ..parallel.expert_grid import ExpertGrid
from ..parallel.layout import Layout
from ..parallel.shards import StageParams, merge_bytes, stage_params
from .schedule import (FRAMEWORKS, SCHEDULES, chunk_forwards, embedding_grad_blocks, fsdp_sharded, grads_resident,
                              grads_resident_at_end, in_flight, receive_buffers)
from ..parallel.pipeline_split import EVEN, PipelineSplit, chunk_layers, stage_layer_ids
from ..parallel.tensor_parallel import check_tp, kv_divisor
from ..precision.fp4 import BLOCK_RECIPES, low_precision
from ..precision.fp8 import fp8_bytes, fp8_weight_states

OPTIMIZERS = ("adamw", "sgd-momentum", "adafactor", "adam8bit")
RECOMPUTE = ("none", "selective", "full")
OFFLOAD = ("none", "optimizer")
FSDP_ALIASES = {"full_shard": 3, "shard_grad_op": 2, "no_shard": 0}  # FSDP sharding strategy -> ZeRO
BREAKDOWN_KEYS = ("weights", "gradients", "optimizer", "activations", "temporaries")
# the start of the step's first backward; of a later one (gradients set to None at the first); the optimizer step
# the end of the backward, on the embedding's rank (calc.memory.schedule.embedding_grad_blocks)
PHASES = ("backward", "later_backward", "backward_end", "optimizer")
# Optimizer state elements per parameter (Adafactor: factored rows + cols, counted per matrix).
_STATES = {"adamw": 2, "sgd-momentum": 1, "adafactor": 0, "adam8bit": 2}
# bitsandbytes 8-bit Adam: 1 byte per state plus one fp32 absmax per 2048-element block
# (Dettmers et al. 2022, arXiv:2110.02861, section 2).
_ADAM8BIT_STATE_BYTES = 1 + 4 / 2048


@dataclass(frozen=True)
class TrainOptions:
    batch: int = 1  # micro-batch size (sequences)
    seq: int = 2048
    grad_accum: int = 1  # micro-batches per step (pipeline: micro-batches per stage)
    dtype: str = "bf16"  # fp32, or bf16/fp16 (mixed precision: see master_weights); fp8: bf16 with FP8 linears (TE)
    fp8_params: bool = False  # fp8: the linears' weights are FP8 themselves (Megatron-LM --fp8-param-gather)
    master_weights: bool = True  # bf16/fp16: fp32 master copy and fp32 optimizer states
    optimizer: str = "adamw"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False  # Megatron sequence parallelism over the TP group
    ep: int = 1
    etp: int | None = None  # routed experts' tensor-parallel size (None: tp, Megatron-Core's default; calc.parallel.expert_grid)
    cp: int = 1
    zero: int = 0
    offload: str = "none"
    recompute: str = "none"
    flash: bool = True
    dropout: bool = False
    capacity_factor: float = 1.0  # MoE: routed slots per token assignment (1.0 = dropless, balanced)
    schedule: str = "1f1b"  # pipeline schedule: 1f1b or gpipe (calc.memory.schedule)
    vp: int = 1  # model chunks per pipeline rank: the interleaved 1F1B schedule
    framework: str = "megatron"  # what the training code keeps: megatron or torch (calc.memory.schedule)
    loss: str = "fp32"  # torch: "bf16", cross-entropy on the bf16 logits themselves (no fp32 upcast)
    # the head's weight gradient written straight into a persistent buffer (Megatron-LM's gradient-accumulation
    # fusion) rather than returned through autograd; None: the framework's (megatron yes, torch no)
    grad_accumulation_fusion: bool | None = None
    vocab_parallel: bool = True  # embedding, lm_head and logits split over the TP ranks (False: whole on each)
    world_size: int | None = None  # checked against dp * tp * pp * cp when given
    pipeline_split: PipelineSplit = EVEN  # Megatron-LM's uneven stages (calc.parallel.pipeline_split)
    bytes_overrides: tuple[tuple[str, float], ...] = field(default=())

    @property
    def fp8(self) -> bool:
        """FP8 (or block-scaled MXFP8 / NVFP4) linears as Transformer Engine runs them (everything else bf16)."""
        return low_precision(self.dtype)

    @property
    def wgrad_fusion(self) -> bool:
        """grad_accumulation_fusion, or the framework's default when not given."""
        return self.framework == "megatron" if self.grad_accumulation_fusion is None else self.grad_accumulation_fusion

    @property
    def vocab_tp(self) -> int:
        """Ranks the embedding, lm_head and logits are split over: tp, or 1 without vocab_parallel."""
        return self.tp if self.vocab_parallel else 1

    @property
    def grid(self) -> Layout:
        """The parallel layout (calc.parallel.layout), whose rules memory shares with train, plan and comm."""
        return Layout(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, ep=self.ep, etp=self.etp, vp=self.vp, sp=self.sp,
                      micro_batch=self.batch, zero=self.zero, schedule=self.schedule)

    @property
    def experts(self) -> ExpertGrid:
        """The routed experts' grid over each stage's tp x cp x dp ranks (Megatron-Core's MoE parallel folding)."""
        return self.grid.experts

    def validate(self, spec: ModelSpec) -> None:
        for name in ("batch", "seq", "grad_accum"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        require(self.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        self.grid.validate_sizes()  # the layout's sizes, ZeRO stage and vp rules (calc.parallel.layout)
        require(self.optimizer in OPTIMIZERS, f"--optimizer must be one of {', '.join(OPTIMIZERS)}")
        require(self.recompute in RECOMPUTE, f"--recompute must be one of {', '.join(RECOMPUTE)}")
        require(self.offload in OFFLOAD, f"--offload must be one of {', '.join(OFFLOAD)}")
        require(self.framework in FRAMEWORKS, f"--framework must be one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        if self.schedule == "dualpipe":
            require(self.pp >= 2 and self.pp % 2 == 0, f"--schedule dualpipe pairs stage s with pp - 1 - s: --pp must be "
                                                       f"even, got {self.pp}")
            require(self.grad_accum >= self.pp and self.grad_accum % 2 == 0,
                    f"--schedule dualpipe feeds half the micro-batches from each end: an even count of at least --pp "
                    f"{self.pp}, got {self.grad_accum}")
        if self.vp > 1:
            self.chunks(spec)
            divide(self.grad_accum, self.pp, "--grad-accum over --pp with --vp (interleaved micro-batch groups)")
        require(dtype_name(self.dtype) in ("fp32", "bf16", "fp16", "fp8", *BLOCK_RECIPES),
                f"--dtype for training: fp32, bf16, fp16, fp8, mxfp8 or nvfp4, not {self.dtype}")
        require(not self.fp8_params or self.fp8, "--fp8-params needs --dtype fp8")
        require(self.offload == "none" or self.zero >= 1, "--offload optimizer needs --zero 1, 2 or 3 (ZeRO-Offload)")
        require(0 < self.capacity_factor < float("inf"), f"--capacity-factor must be positive and finite, got {self.capacity_factor}")
        if spec.moe is None:
            require(self.capacity_factor == 1.0, f"--capacity-factor applies to MoE models; {spec.name} has no experts")
        else:  # beyond E / k every expert has a slot for every token: nothing more to hold
            most = spec.moe.num_experts / spec.moe.experts_per_token
            require(self.capacity_factor <= most, f"--capacity-factor {self.capacity_factor:g}: at most "
                                                  f"experts / top-k = {most:g} ({spec.name})")
        check_tp(spec, self.tp, experts=self.experts.expert_tp)
        check_gpus(self.dp * self.tp * self.pp * self.cp, "--dp x --tp x --pp x --cp GPUs")
        self.chunks(spec)
        self.grid.validate(spec, self.seq, self.world_size, gpus_flag="--world-size")  # sequence, world and experts' rules: one Layout

    def chunks(self, spec: ModelSpec) -> tuple[tuple[int, ...], ...]:
        """Decoder layers of each stage's model chunks (calc.parallel.pipeline_split): even, or Megatron-LM's uneven split."""
        rule = "num_layers over --pp x --vp model chunks" if self.vp > 1 else "num_layers over --pp"
        return chunk_layers(spec.num_layers, self.pp, self.vp, self.pipeline_split, rule)


def default_bytes(opts: TrainOptions) -> dict[str, float]:
    """Bytes per element, before --bytes overrides. `state` is per optimizer-state element; the `logits*`
    keys are per logit of this rank (tokens x vocabulary / tp)."""
    base = 2.0 if opts.fp8 else {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}[dtype_name(opts.dtype)]
    mixed = base < 4 and opts.master_weights
    state = _ADAM8BIT_STATE_BYTES if opts.optimizer == "adam8bit" else (4.0 if mixed or base == 4 else base)
    torch = opts.framework == "torch"
    bf16_loss = torch and opts.loss == "bf16" and base == 2.0 and not opts.fp8
    # torch runs ZeRO-2 and 3 as FSDP2 (calc.memory.schedule.fsdp_sharded), whose fp32 sharded parameters are the master
    # weights and whose gradients are fp32 shards; ZeRO-3 keeps only those shards (its weights), ZeRO-2
    # (reshard_after_forward=False) also the bf16 parameters it gathered, from the forward to the end of backward
    fsdp2 = torch and fsdp_sharded(opts.zero) and mixed
    full_shard = fsdp2 and opts.zero == 3
    return {
        "weight": 4.0 if full_shard else base, "grad": 4.0 if fsdp2 else base,
        "master": 4.0 if mixed and not full_shard else 0.0, "state": state,
        "activation": base, "mask": 1.0,  # dropout masks: 1 byte (Korthikanti et al.)
        "gather": base,  # ZeRO-3's gathered weights, in the compute dtype
        # fp32 cross-entropy at the start of backward: log-probs, their gradient and the logits' gradient;
        # torch's loss_parallel (tp > 1): log-probs, zeros_like, exp and their sum, plus the caller's bf16 logits
        # torch's cross-entropy on bf16 logits (--loss bf16): the gradient of the log-probs and the logits', 2 bytes each
        # (with logits_saved: 6.00 bytes a logit element on one H200, 16.00 with the fp32 upcast; experiments/probe_torch_loss.py)
        "logits": (2 * base if bf16_loss else 18.0 if torch and opts.vocab_tp > 1 else 12.0),
        "logits_saved": base if bf16_loss else 4.0,  # log-probs a micro-batch's loss keeps from its forward to its backward
        "logits_kept": base if torch else 0.0,  # pipeline outputs kept to the end of the step (torch pipelining)
        **(fp8_bytes(opts.fp8_params, dtype_name(opts.dtype)) if opts.fp8 else {}),
    }


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    micro_batches_in_flight: int  # forwards in flight at the peak: micro-batches; with vp > 1, model-chunk forwards
    params: int  # parameters this rank holds before ZeRO sharding
    breakdown: Mapping[str, int]  # BREAKDOWN_KEYS at the peak phase; sums to total
    detail: Mapping[str, int]  # sub-parts of optimizer, activations and temporaries at the peak phase
    cpu_bytes: int  # offloaded to host memory
    phase: str = "backward"  # the phase of the peak (PHASES)
    phases: Mapping[str, int] = field(default_factory=dict)  # total bytes of each phase

    @property
    def total(self) -> int:
        return sum(self.breakdown.values())


@dataclass(frozen=True)
class TrainMemory:
    model: str
    options: TrainOptions
    bytes_per_element: Mapping[str, float]
    stages: tuple[StageMemory, ...]
    activation_items: tuple[tuple[str, float], ...]  # per-layer saved tensors of layer 0 (bytes)
    model_state_bytes_unsharded: int  # all parameters x (weight + grad + optimizer) bytes, one GPU

    @property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total)

    @property
    def total(self) -> int:
        return self.peak_stage.total

    @property
    def breakdown(self) -> Mapping[str, int]:
        return self.peak_stage.breakdown

    @property
    def world_size(self) -> int:
        o = self.options
        return o.dp * o.tp * o.pp * o.cp


def train_memory(spec: ModelSpec, opts: TrainOptions = TrainOptions()) -> TrainMemory:
    """Per-GPU training memory of `spec` under `opts`; parts of every stage add to its total."""
    opts.validate(spec)
    nbytes = merge_bytes(default_bytes(opts), opts.bytes_overrides)
    split = _split(spec, opts)
    stages = tuple(_stage(spec, opts, nbytes, split, i) for i in range(opts.pp))
    items = layer_saved(spec, 0, opts.flash, opts.dropout, opts.capacity_factor, opts.fp8)
    per_item = tuple((i.name, item_bytes(i, split, nbytes)) for i in items)
    from ..counts.params import count_params

    total_params = count_params(spec).total
    per_param = nbytes["weight"] + nbytes["grad"] + _optimizer_bytes_per_param(opts, nbytes)
    unsharded = int(round(total_params * per_param)) if opts.optimizer != "adafactor" else 0
    return TrainMemory(spec.name, opts, nbytes, stages, per_item, unsharded)


def _split(spec: ModelSpec, opts: TrainOptions) -> Split:
    local = opts.seq // opts.cp
    return Split(tokens=opts.batch * local, keys=local, tp=opts.tp, sp=opts.sp, kv_div=kv_divisor(spec, opts.tp),
                 etp=opts.experts.expert_tp)


def _optimizer_bytes_per_param(opts: TrainOptions, nbytes: Mapping[str, float]) -> float:
    return nbytes["master"] + _STATES[opts.optimizer] * nbytes["state"]


def _states(opts: TrainOptions, nbytes: dict, sp: StageParams) -> dict[str, float]:
    """Weights, gradients, fp32 master weights, optimizer states and CPU-offloaded bytes of one rank (ZeRO)."""
    shard = opts.dp * opts.cp  # ZeRO shards over the ranks that hold the same replica
    expert_shard = opts.experts.edp  # routed experts: over the expert data-parallel group

    def sharded(stage_min: int, per_param: float) -> float:
        if opts.zero < stage_min:
            return sp.total * per_param
        return sp.dense * per_param / shard + sp.expert * per_param / expert_shard

    out = {"weights": sharded(3, nbytes["weight"]), "gradients": sharded(2, nbytes["grad"]),
           "master_weights": sharded(1, nbytes["master"]), "cpu": 0.0}
    if opts.optimizer == "adafactor":  # factored second moment, sized by this rank's matrices
        out["optimizer_states"] = sp.matrix_factors * nbytes["state"] * (sharded(1, 1.0) / max(sp.total, 1))
    else:
        out["optimizer_states"] = sharded(1, _STATES[opts.optimizer] * nbytes["state"])
    if opts.offload == "optimizer":
        out["cpu"], out["master_weights"], out["optimizer_states"] = out["master_weights"] + out["optimizer_states"], 0.0, 0.0
    return out


def _held_share(opts: TrainOptions, sp: StageParams) -> float:
    """The share of the stage's weights one rank holds under ZeRO-3 (dense over dp x cp, experts over edp)."""
    shard = opts.dp * opts.cp
    held = sp.dense / shard + sp.expert / opts.experts.edp
    return held / max(sp.total, 1)


def rank_ends(opts: TrainOptions, stage: int) -> tuple[bool, bool]:
    """(holds the embedding, holds the final norm and head) of pipeline rank `stage`: the first and the last; with
    DualPipe, whose rank s also holds stage pp - 1 - s, ranks 0 and pp - 1 both hold both."""
    ranks = (stage, opts.pp - 1 - stage) if opts.schedule == "dualpipe" else (stage,)
    return 0 in ranks, opts.pp - 1 in ranks


def _activations(spec: ModelSpec, opts: TrainOptions, nbytes: dict, split: Split, sp: StageParams,
                 layers: Sequence[int], held: int, stage: int, chunks: tuple[int, ...]) -> dict[str, float]:
    """Saved activations of `held` micro-batches in flight and the temporaries beside them at the start of a
    backward (held = 0: between steps, at the optimizer step: only the persistent buffers and kept outputs)."""
    first, last = rank_ends(opts, stage)
    # stage-equivalents of micro-batches: each chunk's forwards in flight x its share of the stage's layers
    # (held / vp when the chunks hold equal layers)
    mbs = sum(chunk_forwards(held, opts.pp, opts.vp, c) * n for c, n in enumerate(chunks)) / sum(chunks)
    if opts.schedule == "dualpipe":  # `layers` are the rank's two stages; `held` stage-forwards spread over both
        mbs = held / 2
    items = [layer_saved(spec, layer, opts.flash, opts.dropout, opts.capacity_factor, opts.fp8) for layer in layers]
    per_mb_layers = sum(layer_bytes(it, split, nbytes, opts.recompute, spec.hidden_size) for it in items)
    ends = 0.0
    if first and opts.dropout:  # embedding dropout mask
        ends += item_bytes(Saved("embedding dropout mask", spec.hidden_size, "seq", "mask"), split, nbytes)
    if last:  # final norm input and lm_head input
        ends += item_bytes(Saved("final norm + lm_head inputs", 2 * spec.embed_dim, "seq"), split, nbytes)
    working = 0.0
    if opts.recompute == "full" and held:  # the layer being recomputed holds its full activations
        working = max(layer_bytes(it, split, nbytes, "none", spec.hidden_size) for it in items)
    logit_count = split.tokens * -(-spec.vocab_size // opts.vocab_tp) if last else 0
    logits = logit_count * nbytes["logits"] if held else 0.0
    # The loss's logits temporaries are freed before the first layer is recomputed: the peak
    # holds whichever is larger.
    logits, working = (logits, 0.0) if logits >= working else (0.0, working)
    boundary = item_bytes(Saved("stage boundary", spec.hidden_size, "seq"), split, nbytes)
    # ZeRO-3 as FSDP runs it with each decoder layer wrapped and the model as the root: the layer in use and
    # the one prefetched, and the root unit (embeddings, final norm, head), which FSDP keeps unsharded from
    # its forward to the end of backward (reshard_after_forward defaults to False for the root)
    gather = (2 * sp.largest_layer + sp.root) * nbytes["gather"] if opts.zero == 3 and held else 0.0
    return {
        "activations_layers": mbs * per_mb_layers, "activations_embedding_head": mbs * ends,
        "activations_recompute_working": working, "temporaries_logits": logits,
        # the other micro-batches in flight keep their loss's log-probs until their backward (GPipe)
        "temporaries_logits_saved": (0 if opts.schedule == "dualpipe" else  # the head's backward follows its forward
                                     max(chunk_forwards(held, opts.pp, opts.vp, opts.vp - 1) - 1, 0)) * logit_count
        * nbytes["logits_saved"],
        "temporaries_logits_kept": opts.grad_accum * logit_count * nbytes["logits_kept"] if opts.pp > 1 else 0.0,
        "temporaries_receive_buffers": boundary * receive_buffers(opts.framework, opts.pp, stage, held, opts.grad_accum,
                                                                  opts.vp),
        "temporaries_zero3_gather": gather,
        "temporaries_embedding_grads": 0.0,  # the backward's end only (_stage)
    }


def embedding_grad_bytes(spec: ModelSpec, opts: TrainOptions, nbytes: Mapping[str, float]) -> float:
    """Bytes of the embedding-sized gradients autograd holds as the backward ends (calc.memory.schedule): blocks of
    this rank's table (vocabulary / vocab_tp x embedding width) in the compute dtype."""
    resident = grads_resident_at_end(opts.framework, opts.grad_accum * opts.vp, opts.dp * opts.cp)
    blocks = embedding_grad_blocks(spec.tie_word_embeddings and opts.pp == 1, opts.wgrad_fusion, resident)
    return blocks * embedding_table_bytes(spec, opts.vocab_tp, nbytes)


def embedding_table_bytes(spec: ModelSpec, vocab_tp: int, nbytes: Mapping[str, float]) -> float:
    """One rank's token-embedding table (vocabulary / vocab_tp x embedding width) in the compute dtype."""
    return -(-spec.vocab_size // vocab_tp) * spec.embed_dim * nbytes["activation"]


def _phase(states: dict, acts: dict, grads: bool) -> tuple[dict[str, int], dict[str, int]]:
    """(breakdown, detail) of one phase: model states (gradients if they exist) and what `acts` holds."""
    detail = {"master_weights": states["master_weights"], "optimizer_states": states["optimizer_states"],
              "fp8_weight_copies": states.get("fp8_weight_copies", 0.0), **acts}
    detail = {k: int(round(v)) for k, v in detail.items()}
    breakdown = {
        "weights": int(round(states["weights"])) + detail["fp8_weight_copies"], "gradients": int(round(states["gradients"])) if grads else 0,
        "optimizer": detail["master_weights"] + detail["optimizer_states"],
        "activations": sum(v for k, v in detail.items() if k.startswith("activations_")),
        "temporaries": sum(v for k, v in detail.items() if k.startswith("temporaries_")),
    }
    return breakdown, detail


def _stage(spec: ModelSpec, opts: TrainOptions, nbytes: dict, split: Split, stage: int) -> StageMemory:
    """The stage's peak over its phases (PHASES): the first backward of the step, a later backward (only when
    gradients were absent at the first: all of them exist, one micro-batch fewer in flight) and the optimizer."""
    chunks = opts.chunks(spec)[stage]
    blocks = stage_layer_ids(spec.num_layers, opts.pp, 1, opts.pipeline_split)
    layers = blocks[stage]  # one block of the stage's count
    ends = rank_ends(opts, stage)
    if opts.schedule == "dualpipe":  # rank s also holds stage pp - 1 - s
        layers = tuple(layers) + tuple(blocks[opts.pp - 1 - stage])
        chunks = (len(layers),)
    etp = opts.experts.expert_tp
    sp = stage_params(spec, layers, *ends, opts.tp, opts.ep, opts.pp, opts.vocab_parallel, etp=etp)
    states = _states(opts, nbytes, sp)
    if opts.fp8:
        states["fp8_weight_copies"], saving = fp8_weight_states(spec, layers, opts.tp, opts.ep, nbytes, opts.fp8_params,
                                                                etp)
        # FP8 parameters shrink the weights this rank holds: with ZeRO-3 its shard of them (the dense share; a
        # routed expert's FP8 linears shard over the expert data-parallel group as its weights do)
        states["weights"] -= saving * _held_share(opts, sp) if opts.zero >= 3 else saving
    held = in_flight(opts.schedule, opts.pp, stage, opts.grad_accum, opts.vp)
    grads = grads_resident(opts.framework, opts.schedule, held, opts.grad_accum * opts.vp, opts.zero, opts.dp * opts.cp)
    at = {"backward": (held, grads), "optimizer": (0, True)}
    if not grads and held > 1:
        at["later_backward"] = (held - 1, True)
    parts = {name: _phase(states, _activations(spec, opts, nbytes, split, sp, layers, n, stage, chunks), g)
             for name, (n, g) in at.items()}
    if ends[0]:
        end = embedding_grad_bytes(spec, opts, nbytes)
        if end:
            acts = {**_activations(spec, opts, nbytes, split, sp, layers, 0, stage, chunks),
                    "temporaries_embedding_grads": end}
            parts["backward_end"] = _phase(states, acts, True)
    totals = {name: sum(parts[name][0].values()) for name in PHASES if name in parts}
    peak = max(totals, key=lambda name: totals[name])  # ties: the earlier phase
    breakdown, detail = parts[peak]
    return StageMemory(stage, len(layers), held, sp.total, breakdown, detail, int(round(states["cpu"])), peak, totals)


def zero_from_fsdp(strategy: str) -> int:
    key = strategy.lower()
    if key not in FSDP_ALIASES:
        raise MlsysError(f"--fsdp must be one of {', '.join(FSDP_ALIASES)}, got {strategy!r}")
    return FSDP_ALIASES[key]
