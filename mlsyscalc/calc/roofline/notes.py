"""The notes a model-level roofline prints: which approximations and options shaped its rows."""

from __future__ import annotations

from ...specs.model import ModelSpec
from .host import HostCosts, host_path_unit
from .options import RooflineOptions


def model_notes(spec: ModelSpec, opts: RooflineOptions, host: HostCosts | None = None) -> tuple[str, ...]:
    notes = []
    if spec.sliding_window and spec.sliding_window_layers:
        how = ("kernels skip KV tiles outside the window (prefill/train FLOPs ~ S*min(S, W); decode reads at most "
               "W keys; --sliding-window full counts the full causal sequence)" if opts.window == "skip" else
               "counted over the full causal sequence (--sliding-window full; a masking kernel without tile "
               "skipping); decode reads the whole context")
        notes.append(f"sliding window {spec.sliding_window} on {spec.sliding_window_layers} of {spec.num_layers} "
                     f"layers: {how}")
    chunked = sum(spec.layer_type(i) == "chunked_attention" for i in range(spec.num_layers))
    if chunked:
        how = ("kernels skip KV tiles outside each query's chunk (a decode reads its chunk's keys only)"
               if opts.window == "skip" else "counted over the full causal sequence (--sliding-window full)")
        notes.append(f"chunked attention ({spec.attention_chunk_size} tokens) on {chunked} of {spec.num_layers} "
                     f"layers: {how}")
    if spec.attention_sinks:
        notes.append("attention sinks: one learned logit per head joins each softmax (no matmul, no cache)")
    if spec.mla is not None:
        notes.append("MLA: decode attends over the cached latent with absorbed up-projections (MQA, "
                     "d_qk = kv_lora_rank + rope, d_v = kv_lora_rank); prefill over expanded per-head K/V")
    if spec.is_moe:
        notes.append("MoE: weights of the expected distinct experts E(1-(1-k/E)^T) are read; T = tokens of the step")
    if opts.impl == "torch":
        notes.append("kernels as plain PyTorch runs them (--impl torch: rotary as 3 kernels per tensor, split-K "
                     "reductions, separate activation and gate product, ...; docs/roofline.md, Kernels per op)")
        unit = host_path_unit(opts)
        if unit is not None:
            h = host or HostCosts()
            what, cost = (("eager training", f"{h.s_per_kernel * 1e6:.3g} us per kernel") if unit == "kernel" else
                          ("eager launch", f"{h.s_per_layer * 1e3:.3g} ms per decoder layer"))
            notes.append(f"{what} on one GPU: the step is the longer of the GPU's path and the host's "
                         f"(totals.host_path_s, {cost}, {h.source}; docs/roofline.md, Host path)")
    if opts.logits == "last" and opts.phase == "prefill":
        notes.append("lm_head on the last position of each sequence only (--logits last); MFU's model FLOPs "
                     "exclude the skipped positions")
    if opts.phase == "train":
        notes += _train_notes(opts)
    return tuple(notes)


def _train_notes(opts: RooflineOptions) -> list[str]:
    notes = [{"none": "no activation recomputation",
              "selective": "selective recomputation: the attention core runs again before its backward (rows "
                           "'recompute'); MFU excludes it",
              "full": "full recomputation: every layer's forward kernels (and TP all-reduces) run again before "
                      "backward (rows 'recompute'); MFU excludes it"}[opts.recompute]]
    if not opts.master_weights:
        notes.append("AdamW on the model-dtype weights with states in that dtype (--no-master-weights)")
    if opts.dp > 1:
        overlap = ("overlapped (gradients with backward, parameter all-gathers with forward, ZeRO-3 both with "
                   "forward + backward); only the excess is added to the step" if opts.dp_overlap
                   else "added to the step, not overlapped (--dp-overlap hides it behind kernels)")
        notes.append(f"data parallel x{opts.dp}, ZeRO-{opts.zero}: gradient/parameter traffic from calc.comm.step, "
                     f"{overlap}; tokens/s counts all replicas" + ("; AdamW over 1/dp of the parameters"
                                                                    if opts.zero >= 1 else ""))
    return notes
