"""Per-GPU memory for serving: weights (any dtype, with group-wise quantisation overhead),
the KV cache and the activation workspace of one forward step; and the largest batch or
context that fits a GPU.

KV cache per token per layer (`ModelSpec.kv_cache_elements_per_token`): K and V of every KV
head (GQA/MQA: fewer than the query heads), or DeepSeek MLA's compressed latent plus the
shared rotary key (arXiv:2405.04434, section 2.1.2). Layers with a sliding window keep at
most `sliding_window` tokens, chunked-attention layers (Llama 4) at most `attention_chunk_size`
(one chunk: calc.counts.attention.MASKS). The count is the cache at a step, its newest token included;
transformers' DynamicCache keeps W - 1 (C - 1) tokens of such a layer between steps. Paged attention (Kwon et al. 2023, vLLM) allocates whole blocks
of `block_size` tokens: the last block of each sequence is partly empty.

Tensor parallelism splits the weights as Megatron-LM does (`calc.parallel.shards`) and the KV
heads across ranks; when tp exceeds the KV heads, each rank keeps one KV head (replicated
tp/kv times, as vLLM does); MLA's latent is not per head, so every rank keeps all of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ...block_formats import FORMATS
from ...dtypes import block_format, bytes_per_element, dtype_name, value_bytes
from ...errors import require
from ...specs.model import ModelSpec
from ...validate import check_gpus
from ..counts.attention import MASKS
from ..counts.flops import layer_kinds
from ..counts.layers import layer_linears
from ..parallel.shards import linear_weight_per_rank, merge_bytes, stage_params
from ..parallel.tensor_parallel import check_tp, kv_divisor, tp_kind

WEIGHT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "nf4", *FORMATS)
BREAKDOWN_KEYS = ("weights", "kv_cache", "activations")
# Default quantisation groups: GPTQ/AWQ int4 use 128 input columns per scale; bitsandbytes nf4
# blocks of 64; int8 (LLM.int8 / SmoothQuant) one scale per output channel; fp8 one per tensor.
DEFAULT_GROUP = {"int4": 128, "nf4": 64, "int8": 0, "fp8": -1}  # 0: per channel, -1: per tensor
# Bytes per group: int4 fp16 scale + packed 4-bit zero point; nf4 fp32 absmax; int8/fp8 an fp16/fp32 scale.
SCALE_BYTES = {"int4": 2.0, "nf4": 4.0, "int8": 2.0, "fp8": 4.0}
ZERO_BYTES = {"int4": 0.5, "nf4": 0.0, "int8": 0.0, "fp8": 0.0}
# Block-scaled formats (mlsyscalc.block_formats) fix their group: one scale per `block` input columns (NVFP4: an
# E4M3 byte per 16; MX: an E8M0 byte per 32), and NVFP4 one fp32 scale per tensor besides.
for _name, _fmt in FORMATS.items():
    DEFAULT_GROUP[_name], SCALE_BYTES[_name], ZERO_BYTES[_name] = _fmt.block, _fmt.scale_bytes, 0.0


@dataclass(frozen=True)
class InferOptions:
    batch: int = 1  # sequences served together
    context: int = 4096  # tokens per sequence held in the KV cache (prompt + generated)
    dtype: str = "bf16"  # weights of the decoder layers' projections
    base_dtype: str = "bf16"  # embeddings, lm_head, norms, biases and activations
    kv_dtype: str = "bf16"
    group_size: int | None = None  # quantisation group (input columns per scale); None: DEFAULT_GROUP
    tp: int = 1
    block_size: int = 0  # paged KV cache block (tokens); 0: contiguous, exactly `context` tokens
    prefill_chunk: int = 2048  # tokens per prefill step (chunked prefill's token budget)
    flash: bool = True  # no S x S_kv scores in the prefill workspace
    live_hidden: int = 2  # hidden-wide tensors alive beside the attention/MLP phase (2: residual + norm output)
    bytes_overrides: tuple[tuple[str, float], ...] = field(default=())

    def validate(self, spec: ModelSpec) -> None:
        for name in ("batch", "context", "tp", "prefill_chunk", "live_hidden"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        require(self.block_size >= 0, f"--block-size must be >= 0, got {self.block_size}")
        require(dtype_name(self.dtype) in WEIGHT_DTYPES, f"--dtype must be one of {', '.join(WEIGHT_DTYPES)}")
        require(dtype_name(self.base_dtype) in ("fp32", "bf16", "fp16"), "--base-dtype must be fp32, bf16 or fp16")
        require(self.group_size is None or self.group_size > 0, f"--group-size must be positive, got {self.group_size}")
        check_tp(spec, self.tp)
        check_gpus(self.tp, "--tp")
        if self.group_size is not None:
            self._validate_group(spec)

    def _validate_group(self, spec: ModelSpec) -> None:
        """A quantisation group spans input columns of one rank's weight: never wider than the narrowest."""
        assert self.group_size is not None  # called only with --group-size
        q = dtype_name(self.dtype)
        require(q in DEFAULT_GROUP and q not in FORMATS, f"--group-size applies to quantised --dtype (int4, nf4, int8, fp8), "
                                                         f"not {self.dtype}" + (" (its format fixes the block)" if q in FORMATS else ""))
        narrowest = min(lin.in_features // (self.tp if tp_kind(lin) == "row" else 1)
                        for layer in {0, spec.num_layers - 1} for lin in layer_linears(spec, layer))
        require(self.group_size <= narrowest, f"--group-size {self.group_size} is wider than the narrowest weight "
                                              f"input ({narrowest} columns per rank)")


def default_bytes(opts: InferOptions) -> dict[str, float]:
    q = dtype_name(opts.dtype)
    return {
        "weight": value_bytes(q), "base": bytes_per_element(opts.base_dtype),  # a block format's scales: "scale"
        "kv": bytes_per_element(opts.kv_dtype), "activation": bytes_per_element(opts.base_dtype),
        "scale": SCALE_BYTES.get(q, 0.0), "zero": ZERO_BYTES.get(q, 0.0),
        "logits": 4.0,  # fp32 logits of the last token of each sequence
    }


@dataclass(frozen=True)
class InferMemory:
    model: str
    options: InferOptions
    bytes_per_element: Mapping[str, float]
    breakdown: Mapping[str, int]  # weights, kv_cache, activations: sums to total
    detail: Mapping[str, int]
    kv_bytes_per_token: float  # all layers, this rank, without sliding windows or paging
    kv_tokens_cached: int  # token slots per sequence, summed over layers / num_layers (paging included)

    @property
    def total(self) -> int:
        return sum(self.breakdown.values())


def infer_memory(spec: ModelSpec, opts: InferOptions = InferOptions()) -> InferMemory:
    opts.validate(spec)
    nbytes = merge_bytes(default_bytes(opts), opts.bytes_overrides)
    kv_split = kv_divisor(spec, opts.tp)
    quantised_params, quant, scales = _weights(spec, opts, nbytes, kv_split)
    params = stage_params(spec, range(spec.num_layers), True, True, opts.tp, 1, 1)
    base = (params.total - quantised_params) * nbytes["base"]
    per_token_layer = spec.kv_cache_elements_per_token / kv_split * nbytes["kv"]
    slots = _kv_slots(spec, opts)
    kv = opts.batch * slots * per_token_layer
    workspace, logits = _workspace(spec, opts, nbytes)
    exact = {"weights_quantised": quant, "weights_scales": scales, "weights_unquantised": base,
             "activations_workspace": workspace, "activations_logits": logits}
    detail = {k: int(round(v)) for k, v in exact.items()}
    breakdown = {
        "weights": detail["weights_quantised"] + detail["weights_scales"] + detail["weights_unquantised"],
        "kv_cache": int(round(kv)),
        "activations": detail["activations_workspace"] + detail["activations_logits"],
    }
    return InferMemory(spec.name, opts, nbytes, breakdown, detail,
                       per_token_layer * spec.num_layers, slots // spec.num_layers)


def _weights(spec: ModelSpec, opts: InferOptions, nbytes: Mapping[str, float],
             kv_split: int) -> tuple[int, float, float]:
    """Decoder projections' weight elements per rank, their bytes in --dtype, and the bytes of their
    quantisation scales / zero points."""
    q = dtype_name(opts.dtype)
    group = opts.group_size if opts.group_size is not None else DEFAULT_GROUP.get(q)
    weight_elems = scale_groups = 0
    tensor_scales = 0.0
    for layer in range(spec.num_layers):
        for lin in layer_linears(spec, layer):
            elems = linear_weight_per_rank(lin, opts.tp, 1, kv_split)
            weight_elems += elems
            if group is None:
                continue
            fmt = block_format(q)
            tensor_scales += lin.copies * (fmt.tensor_scale_bytes if fmt else 0.0)  # NVFP4's fp32 scale a tensor
            if group == -1:  # one scale per tensor (per expert copy)
                scale_groups += lin.copies
            else:
                cols = lin.in_features // (opts.tp if tp_kind(lin) == "row" else 1)
                size = cols if group == 0 else group
                scale_groups += -(-cols // size) * (elems // cols)
    return weight_elems, weight_elems * nbytes["weight"], scale_groups * (nbytes["scale"] + nbytes["zero"]) + tensor_scales


def _kv_slots(spec: ModelSpec, opts: InferOptions) -> int:
    """Token slots per sequence summed over layers, each layer by its attention kind (calc.counts.attention.MASKS:
    a window layer keeps at most W tokens, a chunked one at most C; paging rounds each up to blocks)."""
    slots = 0
    for kind, layers in layer_kinds(spec).items():
        held = MASKS[kind].held(opts.context, spec.mask_size(kind))
        if opts.block_size:
            held = -(-held // opts.block_size) * opts.block_size
        slots += layers * held
    return slots


def _workspace(spec: ModelSpec, opts: InferOptions, nbytes: Mapping[str, float]) -> tuple[float, float]:
    """Live tensors of one layer during a prefill chunk (no autograd: only one layer's worth).

    Tokens: the chunk (or the whole batch's tokens if fewer; decode steps use `batch` tokens).
    Live at once: `live_hidden` hidden-wide tensors (2: the residual stream and the norm output,
    as an engine's in-place fused add-norm keeps), then the larger of the attention phase (q, k,
    v, attention output; plus heads x keys scores without flash) and the MLP phase (gate, up and
    their product: 3I; 2I without gating), per TP rank.
    """
    tokens = max(min(opts.prefill_chunk, opts.batch * opts.context), opts.batch)
    tp, kv_div = opts.tp, kv_divisor(spec, opts.tp)
    attn = spec.q_dim / tp + 2 * spec.kv_dim / kv_div + spec.attn_out_dim / tp
    if not opts.flash:  # each chunk token scores up to `context` keys
        attn += spec.num_heads / tp * opts.context
    widths = [lin.out_features for layer in range(spec.num_layers) for lin in layer_linears(spec, layer)
              if lin.name.endswith("up_proj")]
    inter = max(widths) if widths else spec.intermediate_size
    if spec.moe is not None:  # routed tokens: k copies through experts of width I_e
        inter = max(inter, spec.moe.experts_per_token * spec.moe.expert_intermediate_size)
    mlp = (3 if spec.gated_mlp or spec.is_moe else 2) * inter / tp
    workspace = tokens * (opts.live_hidden * spec.hidden_size + max(attn, mlp)) * nbytes["activation"]
    logits = opts.batch * -(-spec.vocab_size // tp) * nbytes["logits"]
    return workspace, logits


def solve_max(spec: ModelSpec, opts: InferOptions, target: str, usable_bytes: int) -> tuple[int, InferMemory | None]:
    """Largest `batch` or `context` whose total fits in usable_bytes (0, None if even 1 doesn't).

    Memory grows monotonically in both, so an exponential search then a bisection finds it.
    """
    require(target in ("batch", "context"), f"--max must be batch or context, got {target!r}")

    def fits(n: int) -> InferMemory | None:
        result = infer_memory(spec, replace(opts, batch=n) if target == "batch" else replace(opts, context=n))
        return result if result.total <= usable_bytes else None

    if fits(1) is None:
        return 0, None
    lo, hi = 1, 2
    while fits(hi) is not None:
        # Any growth of >= 1 byte per token exceeds every GPU long before 2^40 tokens.
        bounded = (f"a {spec.sliding_window}-token sliding window" if spec.sliding_window_layers == spec.num_layers
                   else "at most a window or a chunk of tokens")
        require(hi < 1 << 40, f"--max {target}: memory stops growing with {target} (every layer keeps {bounded}), "
                              "so no largest value exists")
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) is not None else (lo, mid)
    return lo, fits(lo)
