"""The allocations behind a `mlsys bench model` step's persistent tensors, in the order the bench
makes them, derived from the ModelSpec (pure: no torch). `calc.memory.caching_allocator` replays them to
price what torch's caching allocator counts beyond the requested bytes (`persistent_rounding_bytes`).

How the bench allocates (bench.torch_models.build_model, cases.model.step_fn / _measure):

1. The model is built on the device in fp32 (torch's default dtype): every parameter in module
   registration order (embedding, project_in, positions, each layer's norms, attention and MLP,
   final norm, project_out, lm_head; a Linear's weight before its bias). A tied lm_head first
   makes its own fp32 weight, freed when the embedding's weight replaces it.
2. `model.to(bfloat16)` converts each parameter in the same order: the bf16 copy is allocated,
   then the fp32 tensor freed (`param.data = ...`); the tied weight is already converted.
3. Inference: the token ids (int64), then each layer's K and V caches (MLA: one latent cache);
   a CUDA-graph row frees those after timing, empties the cache and allocates them again for
   its eager memory step. Train: ids and targets, the gradients (first backward, taken here in
   reverse parameter order), then fused AdamW's states per parameter (a 4-byte fp32 step, bf16
   exp_avg and exp_avg_sq).
4. The first step's cuBLAS workspace (and cuBLASLt's for biased linears).

Not replayed: the step's own transient tensors (their rounding stays unpriced), the gradients'
interleaving with backward's activations, tensor/data parallel sharding and quantized weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..calc.memory.caching_allocator import Alloc, EmptyCache, Event, Free, simulate

FP32, BF16, INT64 = 4, 2, 8
PAGE = 64  # KV-cache page (tokens) of the paged decode kernel; triton caches are sized in whole pages
ADAM_STEP_BYTES = 4  # fused AdamW keeps each parameter's step count as an fp32 scalar on the device


@dataclass(frozen=True)
class ParamTensor:
    name: str
    numel: int
    tied: bool = False  # the lm_head weight the embedding's replaces


def _linear(name: str, fan_in: int, fan_out: int, bias: bool) -> list[ParamTensor]:
    return [ParamTensor(f"{name}.weight", fan_in * fan_out)] + ([ParamTensor(f"{name}.bias", fan_out)] if bias else [])


def _norm(name: str, width: int, rms: bool, bias: bool) -> list[ParamTensor]:
    return [ParamTensor(f"{name}.weight", width)] + ([ParamTensor(f"{name}.bias", width)] if not rms and bias else [])


def _mlp(prefix: str, h: int, inter: int, gated: bool, bias: bool) -> list[ParamTensor]:
    gate = _linear(f"{prefix}.gate_proj", h, inter, bias) if gated else []
    return gate + _linear(f"{prefix}.up_proj", h, inter, bias) + _linear(f"{prefix}.down_proj", inter, h, bias)


def _attention(spec, p: str) -> list[ParamTensor]:
    h, mla = spec.hidden_size, spec.mla
    if mla is None:
        qk_norm = _norm(f"{p}.q_norm", spec.head_dim, False, True) + _norm(f"{p}.k_norm", spec.head_dim, False, True)
        return (_linear(f"{p}.q_proj", h, spec.q_dim, spec.qkv_bias) + _linear(f"{p}.k_proj", h, spec.kv_dim, spec.qkv_bias)
                + _linear(f"{p}.v_proj", h, spec.num_kv_heads * spec.v_head_dim, spec.qkv_bias)
                + _linear(f"{p}.o_proj", spec.attn_out_dim, h, spec.o_bias) + (qk_norm if spec.qk_norm else []))
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank:
        query = (_linear(f"{p}.q_a_proj", h, mla.q_lora_rank, spec.qkv_bias) + _norm(f"{p}.q_a_norm", mla.q_lora_rank, True, False)
                 + _linear(f"{p}.q_b_proj", mla.q_lora_rank, spec.num_heads * qk, False))
    else:
        query = _linear(f"{p}.q_proj", h, spec.num_heads * qk, False)
    return query + (_linear(f"{p}.kv_a_proj_with_mqa", h, mla.kv_lora_rank + mla.qk_rope_head_dim, spec.qkv_bias)
                    + _norm(f"{p}.kv_a_norm", mla.kv_lora_rank, True, False)
                    + _linear(f"{p}.kv_b_proj", mla.kv_lora_rank, spec.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim), False)
                    + _linear(f"{p}.o_proj", spec.num_heads * mla.v_head_dim, h, spec.o_bias))


def _moe(spec, p: str) -> list[ParamTensor]:
    moe, h = spec.moe, spec.hidden_size
    out = _linear(f"{p}.router", h, moe.num_experts, False)
    stacked = moe.num_experts * h * moe.expert_intermediate_size  # GroupedExperts: one tensor a projection
    out += [ParamTensor(f"{p}.experts.{name}", stacked) for name in ("gate_proj", "up_proj", "down_proj")]
    return out + (_mlp(f"{p}.shared", h, moe.shared_intermediate_size, True, False) if moe.num_shared_experts else [])


def _layer(spec, i: int) -> list[ParamTensor]:
    p, rms = f"layers.{i}", spec.norm == "rmsnorm"
    names = ["input_norm"] + (["post_norm"] if spec.norms_per_layer >= 2 else []) + (
        ["attn_out_norm", "mlp_out_norm"] if spec.norms_per_layer == 4 else [])
    norms = [t for n in names for t in _norm(f"{p}.{n}", spec.hidden_size, rms, spec.norm_bias)]
    mlp = _moe(spec, f"{p}.mlp") if spec.layer_is_moe(i) else _mlp(
        f"{p}.mlp", spec.hidden_size, spec.intermediate_size, spec.gated_mlp, spec.mlp_bias)
    return norms + _attention(spec, f"{p}.attn") + mlp


def param_tensors(spec) -> list[ParamTensor]:
    """The builder's parameters in creation order (= module registration order); the tied lm_head
    weight is listed (tied=True) where the builder makes it, before the embedding replaces it."""
    h, e, rms = spec.hidden_size, spec.embed_dim, spec.norm == "rmsnorm"
    out = [ParamTensor("embed.weight", spec.vocab_size * e)]
    out += _linear("project_in", e, h, False) if spec.embed_proj_dim else []
    out += [ParamTensor("pos.weight", spec.learned_positions * h)] if spec.learned_positions else []
    for i in range(spec.num_layers):
        out += _layer(spec, i)
    out += _norm("norm", h, rms, spec.norm_bias) if spec.final_norm else []
    out += _linear("project_out", h, e, False) if spec.embed_proj_dim else []
    head = _linear("lm_head", e, spec.vocab_size, spec.lm_head_bias)
    if spec.tie_word_embeddings:
        head[0] = ParamTensor(head[0].name, head[0].numel, tied=True)
    return out + head


def build_events(spec) -> list[Event]:
    """Build in fp32, tie the lm_head, convert to bf16 parameter by parameter."""
    params = param_tensors(spec)
    events: list[Event] = [Alloc(("fp32", t.name), FP32 * t.numel) for t in params]
    events += [Free(("fp32", t.name)) for t in params if t.tied]
    for t in params:
        if not t.tied:
            events += [Alloc(("param", t.name), BF16 * t.numel), Free(("fp32", t.name))]
    return events


def cache_events(spec, batch: int, length: int, tag: str = "") -> list[Event]:
    """Decoder.new_caches(batch, length): per layer K then V (B, L, KV, D) bf16, or MLA's one latent."""
    if spec.mla is not None:
        width = [spec.mla.kv_lora_rank + spec.mla.qk_rope_head_dim]
    else:
        width = [spec.num_kv_heads * spec.head_dim, spec.num_kv_heads * spec.v_head_dim]
    return [Alloc((f"cache{tag}", i, j), BF16 * batch * length * w) for i in range(spec.num_layers) for j, w in enumerate(width)]


def _frees(events: list[Event]) -> list[Event]:
    return [Free(ev.key) for ev in events if isinstance(ev, Alloc)]


def step_events(spec, phase: str, batch: int, seq: int, graphs: bool, kernels: str = "torch") -> list[Event]:
    """What is alive when the measured step starts, in allocation order (without the workspace)."""
    events = build_events(spec)
    if phase == "train":
        ids = [Alloc("ids", INT64 * batch * seq), Alloc("targets", INT64 * batch * seq)]
        trained = [t for t in param_tensors(spec) if not t.tied]
        grads = [Alloc(("grad", t.name), BF16 * t.numel) for t in reversed(trained)]
        states = [Alloc((k, t.name), n) for t in trained
                  for k, n in (("step", ADAM_STEP_BYTES), ("exp_avg", BF16 * t.numel), ("exp_avg_sq", BF16 * t.numel))]
        return events + ids + grads + states
    length = seq + (1 if phase == "decode" else 0)
    if kernels == "triton":
        length = -(-length // PAGE) * PAGE
    tokens = 1 if phase == "decode" else seq
    inputs = [Alloc("ids", INT64 * batch * tokens)] + cache_events(spec, batch, length)
    if graphs:  # the graph's inputs and caches are dropped, the cache emptied, the eager step allocates anew
        events += inputs + _frees(inputs) + [EmptyCache()]
    return events + inputs


def persistent_rounding_bytes(spec, phase: str, batch: int, seq: int, graphs: bool, workspace_bytes: tuple[int, ...],
                              kernels: str = "torch") -> int:
    """Bytes torch.cuda.memory_allocated counts beyond the requested sizes of the tensors alive at
    the measured step (weights, caches or gradients and optimizer states, and the step's cuBLAS
    workspaces), by replaying their allocation under the caching allocator's rules."""
    events = step_events(spec, phase, batch, seq, graphs, kernels)
    events += [Alloc(("workspace", i), n) for i, n in enumerate(workspace_bytes) if n]
    return simulate(events).rounding_bytes
