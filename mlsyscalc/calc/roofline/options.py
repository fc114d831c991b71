"""Options of a model-level roofline (`mlsys roofline MODEL`) and the checks that reject impossible ones.

Each default lives here once; the CLI takes its defaults from this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import block_format, dtype_name
from ...errors import require
from ...specs.model import ModelSpec
from ...validate import check_gpus
from .steady import CLOCKS
from ..counts.flops import FlopOptions, check_positions
from ..parallel.tensor_parallel import check_tp

PHASES = ("prefill", "decode", "train")
WINDOW_MODES = ("skip", "full")  # sliding-window attention: skip KV tiles outside the window, or not
RECOMPUTE = ("none", "selective", "full")  # Korthikanti et al. 2022: selective = attention core only
IMPLS = ("fused", "torch")  # one kernel per op, or the kernels plain PyTorch runs (calc.roofline.torch_kernels)
LAUNCHES = ("graph", "eager")  # prefill/decode: replayed from a CUDA graph, or issued op by op from Python
LOGITS = ("all", "last")  # prefill lm_head over every position (calc.counts.flops' convention) or the last one
LOSSES = ("fp32", "fused", "bf16")  # train: the fp32 loss (Megatron-LM's vocab-parallel; torch on logits.float()), one fused
# kernel (the fused list, roofline_head), or torch's cross-entropy on the bf16 logits themselves (torch_kernels.loss_ops)
KV_LAYOUTS = ("contiguous", "paged")  # KV cache in one tensor, or in pages read through a block table (calc.roofline.paged)
ALL_REDUCES = ("nccl", "custom")  # TP all-reduce on NCCL, or on the custom kernel serving engines run (calc.comm.tp_rows)


@dataclass(frozen=True)
class RooflineOptions:
    phase: str = "prefill"
    batch: int = 1
    seq: int = 2048  # prefill/train: new tokens per sequence
    context: int = 0  # decode: tokens already in the KV cache
    tp: int = 1  # tensor-parallel GPUs
    dtype: str = "bf16"  # weights, activations and the matmul compute dtype
    # the GEMMs' activation (input) dtype when it differs from the weights' (--matmul-dtype): nvfp4 weights with
    # bf16 activations are W4A16, with fp8 W4A8; None: --dtype's (int4/nf4: bf16; a block format: itself, W4A4)
    matmul_dtype: str | None = None
    kv_dtype: str | None = None  # KV cache dtype (default: dtype)
    cluster: str | None = None  # cluster spec for the TP collectives (default: one matching the GPU)
    check_fit: bool = True  # inference: weights + KV cache must fit in the GPU's memory
    window: str = "skip"  # sliding-window layers: "skip" KV tiles outside the window, or "full" causal
    recompute: str = "none"  # train: activation recomputation "none", "selective" or "full"
    dp: int = 1  # train: data-parallel replicas (gradient communication via calc.comm.step)
    zero: int = 0  # train with dp: ZeRO stage 0-3 (comm rules of calc.comm.step; 1+ shards AdamW)
    dp_overlap: bool = False  # train with dp: gradient traffic overlaps the backward kernels
    impl: str = "fused"  # "fused": one kernel per op; "torch": plain PyTorch's kernels (docs/roofline.md)
    logits: str = "all"  # prefill: lm_head over "all" positions, or the "last" one as serving engines do
    master_weights: bool = True  # train: AdamW over fp32 master weights and moments (False: model dtype)
    # "graph": replayed from a CUDA graph (no host path); "eager": issued op by op from Python (calc.roofline.host's
    # host path); None: graph for prefill/decode (as serving engines run them), eager for a training step
    launch: str | None = None
    # the card's clocks (calc.roofline.steady): "sustained" (the steady state of back-to-back heavy kernels under the power
    # cap) or "burst" (short calls); None: sustained for a training step, burst for a prefill or decode step
    clocks: str | None = None
    loss: str = "fp32"  # train with impl "fused": the loss's kernels (calc.roofline.head)
    dropout: float = 0.0  # train: hidden dropout before each residual add (a 1-byte mask written and read back)
    kv_layout: str = "contiguous"  # "paged": the KV cache in pages, attention on the paged kernels (serving)
    all_reduce: str = "nccl"  # "custom": small TP all-reduces on the one-shot custom kernel (serving engines)
    # train: the routed experts' layout (Megatron-Core's MoE parallel folding, calc.parallel.expert_grid): a GPU holds E / ep
    # experts, each split over etp ranks (None: tp), and runs them on the sequence-split tokens of its etp ranks
    ep: int = 1
    etp: int | None = None

    @property
    def flop_options(self) -> FlopOptions:
        """The same pass in calc.counts.flops terms (prefill and train count a causal forward)."""
        return FlopOptions(batch=self.batch, seq=self.seq, context=self.context, causal=True,
                           phase="decode" if self.phase == "decode" else "prefill")

    @property
    def launch_mode(self) -> str:
        """How the step is issued: `launch`, or its phase's default (eager for training, graph otherwise)."""
        return self.launch or ("eager" if self.phase == "train" else "graph")

    @property
    def clocks_mode(self) -> str:
        """The clocks the pass is priced at: `clocks`, or its phase's default (sustained for training)."""
        return self.clocks or ("sustained" if self.phase == "train" else "burst")

    @property
    def compute_dtype(self) -> str:
        """The matmul dtype: --matmul-dtype, else int4/nf4 weight-only models compute in bf16, others in --dtype
        (a block-scaled format quantizes the activations too: W4A4 in nvfp4)."""
        if self.matmul_dtype:
            return dtype_name(self.matmul_dtype)
        name = dtype_name(self.dtype)
        return "bf16" if name in ("int4", "nf4") else name

    @property
    def activation_dtype(self) -> str:
        """Activations between kernels: bf16 when matmuls run in fp8/int8, a block-scaled format or weights are 4-bit."""
        name = dtype_name(self.dtype)
        return "bf16" if name in ("fp8", "int8", "int4", "nf4") or block_format(name) else name

    @property
    def kv_dtype_name(self) -> str:
        return dtype_name(self.kv_dtype) if self.kv_dtype else self.activation_dtype

    @property
    def logit_tokens(self) -> int:
        """Positions the lm_head runs on: every new token, or one per sequence with logits "last"."""
        return self.batch if self.logits == "last" else self.tokens

    @property
    def new_tokens(self) -> int:
        return self.flop_options.new_tokens

    @property
    def kv_len(self) -> int:
        return self.flop_options.kv_len

    @property
    def tokens(self) -> int:
        return self.batch * self.new_tokens

    def validate(self, spec: ModelSpec) -> None:
        require(self.phase in PHASES, f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        require(self.tp >= 1, f"tp must be a positive integer, got {self.tp}")
        check_gpus(self.tp * self.dp, "--tp x --dp GPUs")
        self.flop_options.validate()  # batch, seq, context; decode needs a context
        _ = self.kv_dtype_name, self.compute_dtype  # unknown dtypes are an error here
        require(self.compute_dtype not in ("int4", "nf4"),
                f"--matmul-dtype {self.matmul_dtype}: int4/nf4 are weight formats; the GEMMs compute in bf16, fp8 or a "
                "block-scaled format")
        self._validate_positions(spec)
        self._validate_train()
        require(self.ep >= 1 and (self.etp is None or self.etp >= 1), "ep and etp must be positive integers")
        require(self.phase == "train" or (self.ep == 1 and self.etp is None),
                "ep and etp (the routed experts' training layout) apply to --phase train only")
        check_tp(spec, self.tp, experts=self.etp)  # heads, KV heads (split or replicated) and every split width

    def _validate_positions(self, spec: ModelSpec) -> None:
        check_positions(spec, self.kv_len, self.phase)

    def _validate_train(self) -> None:
        require(self.impl in IMPLS, f"impl must be one of {', '.join(IMPLS)}, got {self.impl!r}")
        require(self.logits in LOGITS, f"logits must be one of {', '.join(LOGITS)}, got {self.logits!r}")
        require(self.launch is None or self.launch in LAUNCHES,
                f"launch must be one of {', '.join(LAUNCHES)}, got {self.launch!r}")
        require(self.logits == "all" or self.phase != "train", "--logits last is an inference convention; "
                "a training step computes the loss at every position")
        require(self.window in WINDOW_MODES, f"window must be one of {', '.join(WINDOW_MODES)}, got {self.window!r}")
        require(self.kv_layout in KV_LAYOUTS, f"kv_layout must be one of {', '.join(KV_LAYOUTS)}, got {self.kv_layout!r}")
        require(self.all_reduce in ALL_REDUCES, f"all_reduce must be one of {', '.join(ALL_REDUCES)}, got {self.all_reduce!r}")
        require(self.recompute in RECOMPUTE, f"recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        require(self.clocks is None or self.clocks in CLOCKS,
                f"clocks must be one of {', '.join(CLOCKS)}, got {self.clocks!r}")
        require(self.loss in LOSSES, f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        require(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}")
        require(self.loss != "fused" or (self.phase == "train" and self.impl == "fused"),
                "--loss fused prices the fused kernel list's training loss (--phase train --impl fused)")
        require(self.loss != "bf16" or (self.phase == "train" and self.impl == "torch"),
                "--loss bf16 prices plain PyTorch's cross-entropy on bf16 logits (--phase train --impl torch)")
        require(self.dp >= 1, f"dp must be a positive integer, got {self.dp}")
        require(self.zero in (0, 1, 2, 3), f"zero stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.phase != "train":
            require(self.recompute == "none" and self.dp == 1 and self.zero == 0 and not self.dp_overlap,
                    "--recompute, --dp, --zero and --dp-overlap apply to --phase train only")
            require(self.dropout == 0.0, "--dropout applies to --phase train only")
            return
        require(dtype_name(self.dtype) not in ("int4", "nf4"),
                f"--dtype {self.dtype} is a weight-only inference format; training needs trainable weights "
                "(bf16, fp16, fp8, fp32)")
        require(self.dp > 1 or (self.zero == 0 and not self.dp_overlap), "--zero and --dp-overlap need --dp N > 1")
