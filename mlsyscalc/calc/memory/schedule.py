"""When a training step peaks, and what the framework keeps there: the pipeline schedule's micro-batches in
flight, whether gradients exist at the activation peak, and the per-framework tensors beside the activations.

Frameworks (what each keeps that changes the peak; `reports/train/memory.md` composes measured peaks with them):

  megatron  persistent gradient buffers (Megatron-LM, DeepSpeed): gradients are resident in every phase.
  torch     plain PyTorch: `zero_grad()` sets gradients to None (`set_to_none=True`, the default since torch 2.0),
            so they exist only from the first backward of a step to its optimizer step; DDP's bucket buffers
            (ZeRO-0 with dp x cp > 1, `gradient_as_bucket_view=True`) stay allocated whatever `.grad` says.
            FSDP2 (ZeRO-3) keeps fp32 sharded parameters and fp32 sharded gradients (`reduce_dtype=fp32`).
            DTensor's `loss_parallel` (tp > 1) holds more per logit than a fused loss (`default_bytes`).
            `torch.distributed.pipelining` allocates one receive buffer per micro-batch for each activation
            and gradient a stage receives, and its last stage keeps every micro-batch's output to the step's end.

The end of the backward (phase `backward_end`, on the rank holding the token embedding): the embedding's backward
runs last and returns a table-sized gradient through autograd, which AccumulateGrad adds into an existing gradient
or takes as the gradient when none exists. A head tied to the embedding on the same rank, whose weight gradient
also comes back through autograd (no gradient-accumulation fusion), is a second use of the table: the engine holds
the head's gradient from the start of the backward until the embedding's arrives, then sums the two (three
table-sized blocks at once; `embedding_grad_blocks`). Traced on one H100 (experiments/peak_tensors.py, falcon-40b
with fewer layers, plain torch with persistent gradients): the step's peak held exactly these three blocks beside
the model states. Megatron-LM's gradient-accumulation fusion writes the head's weight gradient into its fp32 main
gradient directly, so only the embedding's own block comes back through autograd.

Schedules (Narayanan et al. 2021, section 2.2; GPipe: Huang et al. 2019):

  1f1b   stage s runs min(pp - s, m) warm-up forwards, then alternates one forward and one backward: that many
         micro-batches are in flight at its peak, and, when m > pp - s, a backward has run before the peak.
         With vp model chunks per rank (interleaved) the count is of chunk-forwards (`in_flight`); on the first
         stage it is Korthikanti et al.'s (1 + (pp - 1) / (pp vp)) x the 1F1B activations (2022, section 4.2.3).
  gpipe  every forward before any backward: all m micro-batches are in flight on every stage, and no backward
         has run when the last forward ends.
  zb1p   zero-bubble 1F1B (Qi et al. 2023, ZB-H1): the backward split into input and weight gradients, the weight
         gradients filling the drain; 1F1B's activations (DeepSeek-AI 2024, DeepSeek-V3 report, Table 2: PP).
  dualpipe  DeepSeek-V3's bidirectional schedule (its report, section 3.2.1, Table 2): rank s holds stages s and
         pp - 1 - s (two copies of the parameters), micro-batches enter from both ends, and each rank holds
         PP + 1 stage-forwards' activations, balanced over its two stages (`in_flight`; calc.memory.training).
"""

from __future__ import annotations

from typing import Any

FRAMEWORKS = ("megatron", "torch")


def fsdp_sharded(zero: Any) -> Any:
    """Whether PyTorch runs this ZeRO stage as FSDP2 (`fully_shard`): ZeRO-3 resharding after the forward, ZeRO-2
    with reshard_after_forward=False (FSDP1's SHARD_GRAD_OP); ZeRO-0 is DDP and ZeRO-1 has no torch form.
    Elementwise over numpy arrays too (plan)."""
    return zero >= 2
SCHEDULES = ("1f1b", "gpipe", "zb1p", "dualpipe")
SPLIT_BACKWARD = ("zb1p", "dualpipe")  # schedules of Megatron-style code only, vp 1 (calc.train.options)


def in_flight(schedule: str, pp: int, stage: int, micro_batches: int, vp: int = 1) -> int:
    """Forwards of model chunks (layers / (pp x vp) each; vp = 1: of whole stages) whose activations a stage holds
    at its peak: 1F1B min(pp - s, m); interleaved 1F1B (Megatron-LM's and torch's ScheduleInterleaved1F1B warm-up,
    2 (pp - s - 1) + (vp - 1) pp forwards, then one more before the first backward), at most m x vp; GPipe m."""
    if schedule == "gpipe":
        return micro_batches * vp
    if schedule == "dualpipe":  # both of the rank's stages together (DeepSeek-V3 report, Table 2)
        return min(pp + 1, micro_batches)
    if vp == 1:
        return min(pp - stage, micro_batches)
    return min(2 * (pp - stage - 1) + (vp - 1) * pp + 1, micro_batches * vp)


def chunk_forwards(held: int, pp: int, vp: int, chunk: int) -> int:
    """How many of the first `held` chunk-forwards of a rank are of its model chunk `chunk`: the interleaved
    schedule runs them in groups of pp micro-batches, chunk 0, 1, ..., vp - 1, 0, ... (m a multiple of pp)."""
    full, rest = divmod(held, pp)
    groups = len(range(chunk, full, vp))
    return groups * pp + (rest if full % vp == chunk else 0)


def grads_resident(framework: str, schedule: str, held: int, forwards: int, zero: int, replicas: int) -> bool:
    """Whether the gradients exist at the activation peak (start of the backward with `held` chunk-forwards in
    flight, of `forwards` = m x vp in the step): always with persistent buffers or DDP's buckets; with gradients
    set to None, only when a backward of the same step has run before (1F1B with more forwards than it holds;
    accumulation without pp)."""
    if framework == "megatron" or (zero == 0 and replicas > 1):
        return True
    return schedule != "gpipe" and forwards > held


def grads_resident_at_end(framework: str, forwards: Any, replicas: Any) -> Any:
    """Whether a parameter's gradient exists before the step's last backward adds to it: persistent buffers, an
    earlier micro-batch's backward in the same step (`forwards` = m x vp > 1), or data parallelism (DDP's buckets
    under ZeRO-0/1; under ZeRO-2/3 the unsharded gradient autograd returns is reduce-scattered into a separate
    shard, so the block stays beside the stored gradient either way). Elementwise over numpy arrays too (plan)."""
    return (framework == "megatron") | (replicas > 1) | (forwards > 1)


def embedding_grad_blocks(tied_here: bool, fusion: bool, resident: bool) -> int:
    """Embedding-table-sized gradient blocks the autograd engine holds as the backward ends (module docstring):
    with a tied head on the same rank and no gradient-accumulation fusion, the head's, the embedding's and their
    sum (3), the sum becoming the gradient when none exists (2); otherwise the embedding's own (1), taken as the
    gradient when none exists (0)."""
    if tied_here and not fusion:
        return 3 if resident else 2
    return 1 if resident else 0


def receive_buffers(framework: str, pp: int, stage: int, held: int, micro_batches: int, vp: int = 1) -> int:
    """Stage-boundary tensors (one micro-batch's hidden states each) of torch.distributed.pipelining's receive
    buffers beyond what the activations count. Each model chunk is a pipeline stage with one buffer per
    micro-batch for the gradient it receives (all but the very last stage) and for the activation it receives
    (all but the very first); those of the chunk-forwards in flight are the chunk's first saved input."""
    if framework != "torch" or pp == 1:
        return 0
    grads = micro_batches * (vp - (stage == pp - 1))
    receiving = held - (chunk_forwards(held, pp, vp, 0) if stage == 0 else 0)
    acts = micro_batches * (vp - (stage == 0)) - receiving
    return grads + acts
