"""Options of one training step of a full parallel layout (`mlsys train`) and the rules a layout obeys.

The rules follow Megatron-LM (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
on GPU Clusters Using Megatron-LM", sections 2-3): GPUs = tp x pp x dp x cp, tensor parallelism stays
inside a node, the layers split evenly into pp x vp model chunks, the global batch into dp x micro-batch
x micro-batches, and the interleaved schedule needs the micro-batches to be a multiple of pp; uneven
stages follow Megatron-LM's options (calc.parallel.pipeline_split). The routed experts fold into each pipeline
stage's tp x cp x dp ranks as their own etp x ep x edp grid, with Megatron-Core's rules (MoE parallel
folding, calc.parallel.expert_grid: tp*cp*dp % (etp*ep), experts % ep, ...). Each violated rule is an MlsysError
that names the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import dtype_name
from ...errors import divide, require
from ...specs.cluster import ClusterSpec
from ...specs.model import ModelSpec
from ..comm.step import placement
from ..parallel.expert_grid import ExpertGrid
from ..parallel.layout import Layout
from ..memory.schedule import FRAMEWORKS, SCHEDULES, SPLIT_BACKWARD
from ..parallel.pipeline_split import EVEN, PipelineSplit, chunk_layers
from ..roofline.options import LOSSES
from ..roofline.steady import CLOCKS
from ..parallel.tensor_parallel import check_tp
from .attention_time import ATTENTION
from ..precision.fp4 import BLOCK_RECIPES, low_precision
from ..precision.fp8 import DEFAULT_RECIPE, RECIPES
from .host import DEFAULT_FRAMEWORK

GRAD_REDUCE = ("fp32", "bf16")  # the dtypes a data-parallel gradient reduction runs in
RECOMPUTE = ("none", "selective", "full")  # Korthikanti et al. 2022: selective = attention core only
# matmul dtype; fp8: Transformer Engine's FP8 linears (calc.precision.fp8), bf16 elsewhere and on the wire; mxfp8 and
# nvfp4 its block-scaled recipes (calc.precision.fp4)
DTYPES = ("bf16", "fp16", "fp8", *BLOCK_RECIPES)
OVERLAP_DIMS = ("tp", "dp", "pp", "cp", "ep")
DEFAULT_OVERLAP = ("dp", "cp")  # DDP/Megatron gradient buckets; ring attention's KV exchange
# SMs that NCCL's kernels hold while overlapped traffic runs: one CTA per channel, and NCCL logs on
# NVLink/NVSwitch hosts report 16 coll channels (8 x H800, NVIDIA/nccl#892) to 24-32 (H100,
# NVIDIA/nccl#1259, #1781); NCCL_MIN_CTAS / NCCL_MAX_CTAS bound it. 16: the low end, the share a
# user cannot easily configure away.
DEFAULT_COMM_SMS = 16


@dataclass(frozen=True)
class TrainStepOptions:
    gpus: int = 1
    seq: int = 2048  # tokens per sequence
    global_batch: int = 1  # sequences per optimizer step over all data-parallel replicas
    micro_batch: int = 1  # sequences per micro-batch on one replica
    tp: int = 1
    pp: int = 1
    dp: int | None = None  # default: gpus / (tp pp cp)
    cp: int = 1
    ep: int = 1  # expert-parallel ranks: routed experts split over ep of a stage's tp x cp x dp ranks
    etp: int | None = None  # expert tensor-parallel size (None: tp, Megatron-Core's default; calc.parallel.expert_grid)
    vp: int = 1  # virtual pipeline stages (model chunks) per GPU: the interleaved 1F1B schedule
    sp: bool = True  # Megatron sequence parallelism over the TP ranks (no effect at tp 1)
    vocab_parallel: bool = True  # memory: embedding, lm_head and logits split over the TP ranks (False: whole)
    zero: int = 0  # 0 plain DP; 1 optimizer states, 2 + gradients, 3 + weights sharded over dp x cp
    recompute: str = "none"
    dtype: str = "bf16"
    fp8_recipe: str = DEFAULT_RECIPE  # fp8: TE's scaling recipe, delayed or current (calc.precision.fp8)
    fp8_params: bool = False  # fp8: FP8 weights themselves (Megatron-LM --fp8-param-gather), no bf16 copy
    overlap: tuple[str, ...] = DEFAULT_OVERLAP  # dimensions whose traffic may hide behind compute
    comm_sms: int = DEFAULT_COMM_SMS  # SMs NCCL holds while overlapped traffic runs (0: overlap is free)
    capacity_factor: float = 1.0  # MoE: expert slots per routed token (1.0 = dropless, balanced)
    reserve: str = "10%"  # memory kept back for the CUDA context and allocator (as `mlsys memory`)
    # attention core: one flash kernel (flash2: one of FlashAttention-2's generation), or Megatron's unfused S x S ones
    attention: str = "flash"
    # memory (calc.memory.schedule): pipeline schedule (1f1b or gpipe; --vp interleaves 1F1B)
    schedule: str = "1f1b"
    # the training code (calc.memory.schedule for memory, calc.train.host for host time): megatron (persistent
    # gradient buffers, no host term) or torch (gradients set to None, FSDP2, DTensor; eager host issue time)
    framework: str = DEFAULT_FRAMEWORK
    # a calibration file's `torch_host` costs replacing torch's built-in ones (calc.train.host.host_overrides)
    host_costs: tuple[tuple[str, float], ...] = ()
    # where host_costs come from (the JSON's framework_source names it)
    host_source: str = "the calibration file's torch_host"
    pipeline_split: PipelineSplit = EVEN  # Megatron-LM's uneven stages (calc.parallel.pipeline_split)
    # the card's clocks: "sustained" (the steady state a long run reaches under the power cap, calc.roofline.steady) or
    # "burst" (the short-call efficiencies the roofline keeps for single kernels)
    clocks: str = "sustained"
    loss: str = "fp32"  # the fused list's loss: Megatron-LM's vocab-parallel fp32 cross-entropy, or "fused" (one kernel)
    dropout: float = 0.0  # hidden dropout before each residual add (the recipe's; 0 in most recipes since Llama)
    clip_grad: bool = True  # the gradient norm and clipping before the optimizer (Megatron-LM's --clip-grad 1.0)
    # gradients on the data-parallel wire: "fp32" or "bf16"; None: the framework's default (grad_reduce_dtype)
    grad_reduce: str | None = None

    @property
    def data_parallel(self) -> int:
        """dp as given, else gpus / (tp pp cp)."""
        if self.dp is not None:
            return self.dp
        return divide(self.gpus, self.tp * self.pp * self.cp, "rule gpus % (tp*pp*cp) == 0: --gpus over tp*pp*cp")

    @property
    def num_micro_batches(self) -> int:
        return divide(self.global_batch, self.data_parallel * self.micro_batch,
                      "rule global_batch % (dp*micro_batch) == 0: --global-batch over dp*micro-batch")

    @property
    def sp_active(self) -> bool:
        return self.sp and self.tp > 1

    @property
    def grid(self) -> Layout:
        """The parallel layout (calc.parallel.layout), whose rules these options share with memory, comm and plan."""
        return Layout(tp=self.tp, pp=self.pp, dp=self.data_parallel, cp=self.cp, ep=self.ep, etp=self.etp, vp=self.vp,
                      sp=self.sp, micro_batch=self.micro_batch, zero=self.zero, schedule=self.schedule)

    @property
    def experts(self) -> ExpertGrid:
        """The routed experts' etp x ep x edp grid over each stage's tp x cp x dp ranks (calc.parallel.expert_grid)."""
        return self.grid.experts

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def memory_dtype(self) -> str:
        """Weights, gradients and activations in memory and on the wire (fp8, mxfp8 and nvfp4 training keep them in bf16)."""
        return "bf16" if low_precision(self.dtype) else dtype_name(self.dtype)

    def grad_reduce_dtype(self, zero: int | None = None) -> str:
        """The dtype the data-parallel gradient reduction moves (docs/train.md, "Gradient reduction"): --grad-reduce if
        given; an fp32 model's own; else megatron fp32 (Megatron-LM accumulates and reduces bf16 training's gradients in
        fp32 unless --grad-reduce-in-bf16; NeMo's and Megatron-Bridge's bf16_mixed set grad_reduce_in_fp32), torch fp32
        with FSDP (ZeRO 2-3: torchtitan's mixed_precision_reduce float32, llm-foundry's DEFAULT mixed precision) and
        the model's dtype under DDP (ZeRO 0: the gradients of a bf16 model)."""
        if self.grad_reduce is not None:
            return self.grad_reduce
        wire = self.memory_dtype
        if wire == "fp32" or self.framework == "megatron":
            return "fp32"
        return "fp32" if (self.zero if zero is None else zero) >= 2 else wire

    @property
    def scaling_recipe(self) -> str:
        """How the low-precision linears scale (calc.precision.fp8): --fp8-recipe for fp8, the dtype for mxfp8 / nvfp4."""
        return dtype_name(self.dtype) if dtype_name(self.dtype) in BLOCK_RECIPES else self.fp8_recipe

    def layout(self) -> dict[str, int | bool | str]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.data_parallel, "cp": self.cp, "ep": self.ep,
                "etp": self.expert_tp, "edp": self.experts.edp, "vp": self.vp, "sp": self.sp_active, "micro_batch": self.micro_batch,
                "num_micro_batches": self.num_micro_batches, "zero": self.zero, "recompute": self.recompute,
                "dtype": self.dtype}

    def validate(self, spec: ModelSpec, cluster: ClusterSpec) -> None:
        for name in ("gpus", "seq", "global_batch"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        require(self.dp is None or self.dp >= 1, f"--dp must be a positive integer, got {self.dp}")
        self.grid_unchecked.validate_sizes()
        require(self.recompute in RECOMPUTE, f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        self.validate_scalars()
        check_tp(spec, self.tp, experts=self.expert_tp)  # heads % tp, KV heads, every split width (experts: etp)
        self.check_layout(spec, cluster)

    @property
    def grid_unchecked(self) -> Layout:
        """The layout before dp is known (dp 1): for the size rules, which read no dp."""
        return Layout(tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, etp=self.etp, vp=self.vp, sp=self.sp,
                      micro_batch=self.micro_batch, zero=self.zero, schedule=self.schedule)

    def validate_scalars(self) -> None:
        """dtype, overlap and capacity factor: the options that are not part of the layout."""
        require(dtype_name(self.dtype) in DTYPES, f"--dtype for training: one of {', '.join(DTYPES)}, got {self.dtype!r}")
        require(self.fp8_recipe in RECIPES, f"--fp8-recipe must be one of {', '.join(RECIPES)}, got {self.fp8_recipe!r}")
        require(not self.fp8_params or dtype_name(self.dtype) == "fp8", "--fp8-params needs --dtype fp8")
        require(set(self.overlap) <= set(OVERLAP_DIMS), f"--overlap: dimensions are {', '.join(OVERLAP_DIMS)}, "
                                                        f"got {', '.join(self.overlap)}")
        require(self.attention in ATTENTION, f"--attention must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        require(self.schedule in SCHEDULES, f"--schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        self.grid_unchecked.validate_schedule()  # vp > 1 only with 1F1B (calc.parallel.layout)
        require(self.framework in FRAMEWORKS, f"--framework must be one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
        require(self.clocks in CLOCKS, f"--clocks must be one of {', '.join(CLOCKS)}, got {self.clocks!r}")
        require(self.loss in LOSSES, f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        require(self.loss != "fused" or self.framework == "megatron",
                "--loss fused prices the fused kernel list (--framework megatron); torch runs its own cross-entropy "
                "(--loss fp32 or bf16)")
        require(self.loss != "bf16" or (self.framework == "torch" and dtype_name(self.dtype) in ("bf16", "fp16")
                                        and (self.tp == 1 or not self.vocab_parallel)),
                "--loss bf16 prices plain PyTorch's cross-entropy on the 16-bit logits (--framework torch, --dtype "
                "bf16 or fp16, the vocabulary whole on each rank: --tp 1); measured on one H200 "
                "(experiments/probe_torch_loss.py)")
        require(0.0 <= self.dropout < 1.0, f"--dropout must be in [0, 1), got {self.dropout}")
        require(self.grad_reduce in (None,) + GRAD_REDUCE,
                f"--grad-reduce must be one of {', '.join(GRAD_REDUCE)}, got {self.grad_reduce!r}")
        require(self.schedule not in SPLIT_BACKWARD or self.framework == "megatron",
                f"--schedule {self.schedule} is priced for Megatron-style code (--framework megatron): torch's "
                "host, memory and kernel rules were measured with its own 1F1B and GPipe")
        require(isinstance(self.comm_sms, int) and self.comm_sms >= 0,
                f"--comm-sms must be a non-negative integer, got {self.comm_sms}")
        require(0 < self.capacity_factor < 100, f"--capacity-factor must be in (0, 100), got {self.capacity_factor}")

    def comm_sm_share(self, sm_count: int | None) -> float:
        """comm_sms / sm_count: the share of the GPU's SMs NCCL holds (0 when the GPU spec has no SM count)."""
        if not sm_count:
            return 0.0
        require(self.comm_sms < sm_count, f"--comm-sms {self.comm_sms} leaves no SM for compute ({sm_count} SMs)")
        return self.comm_sms / sm_count

    def check_layout(self, spec: ModelSpec, cluster: ClusterSpec) -> None:
        """Every layout rule except the tensor-parallel widths (`check_tp`, the costly one; the experts' by etp
        are checked, once per (tp, etp)): the shared ones of `Layout.validate`, then train's own."""
        chunk_layers(spec.num_layers, self.pp, self.vp, self.pipeline_split)  # even, or one of Megatron's uneven splits
        require(self.cp == 1 or self.attention != "unfused",
                "--attention unfused has no context parallelism (ring attention is flash)")
        self.grid.validate(spec, self.seq, self.gpus, node=cluster.scale_up_gpus, megatron=self.framework == "megatron")
        self._validate_world(cluster)
        for dim, (size, stride) in self.experts.groups().items():  # whole expert groups per node, as comm_step
            placement(size, stride, min(cluster.scale_up_gpus, self.gpus), f"expert {dim} group")  # places them

    def _validate_world(self, cluster: ClusterSpec) -> None:
        _ = self.num_micro_batches
        node, word = cluster.scale_up_gpus, cluster.domain_word  # a node, or an NVLink domain of several (NVL72)
        a = "an" if word.startswith("NV") else "a"
        require(self.tp <= node and node % self.tp == 0,
                f"rule TP within {a} {word}: --tp {self.tp} must divide the {node} GPUs of a {cluster.name} {word}")
        if self.gpus > node:
            divide(self.gpus, node, f"rule whole {word}s: --gpus over the {node} GPUs of a {cluster.name} {word}")
            require(cluster.inter is not None, f"{self.gpus} GPUs span nodes, but {cluster.name} has no inter-node link")
        if self.vp > 1:
            divide(self.num_micro_batches, self.pp, "rule num_micro_batches % pp == 0 with --vp (Megatron-LM's "
                                                    "interleaved schedule)")
        self._validate_nodes(node)

    def _validate_nodes(self, node: int) -> None:
        """Rule whole groups per node, as comm_step places ranks (tp, cp, dp, pp inner to outer): `plan`
        skips a layout that breaks it, `train` names it (the experts' groups: check_layout)."""
        stride = 1
        for dim, size in (("tp", self.tp), ("cp", self.cp), ("dp", self.data_parallel), ("pp", self.pp)):
            placement(size, stride, min(node, self.gpus), f"{dim} group")
            stride *= size
