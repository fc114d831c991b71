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

Schedules (Narayanan et al. 2021, section 2.2; GPipe: Huang et al. 2019):

  1f1b   stage s runs min(pp - s, m) warm-up forwards, then alternates one forward and one backward: that many
         micro-batches are in flight at its peak, and, when m > pp - s, a backward has run before the peak.
  gpipe  every forward before any backward: all m micro-batches are in flight on every stage, and no backward
         has run when the last forward ends.
"""

from __future__ import annotations

FRAMEWORKS = ("megatron", "torch")
SCHEDULES = ("1f1b", "gpipe")


def in_flight(schedule: str, pp: int, stage: int, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at its peak."""
    if schedule == "gpipe":
        return micro_batches
    return min(pp - stage, micro_batches)


def grads_resident(framework: str, schedule: str, held: int, micro_batches: int, zero: int, replicas: int) -> bool:
    """Whether the gradients exist at the activation peak (start of the backward with `held` micro-batches in
    flight): always with persistent buffers or DDP's buckets; with gradients set to None, only when a backward
    of the same step has run before (1F1B with more micro-batches than it holds; accumulation without pp)."""
    if framework == "megatron" or (zero == 0 and replicas > 1):
        return True
    return schedule == "1f1b" and micro_batches > held


def receive_buffers(framework: str, pp: int, stage: int, held: int, micro_batches: int) -> int:
    """Stage-boundary tensors (one micro-batch's hidden states each) of torch.distributed.pipelining's receive
    buffers beyond what the activations count: m gradient buffers on every stage but the last, m activation
    buffers on every stage but the first, less the `held` ones that are the first layer's saved input."""
    if framework != "torch" or pp == 1:
        return 0
    grads = micro_batches if stage < pp - 1 else 0
    acts = micro_batches - held if stage > 0 else 0
    return grads + acts
