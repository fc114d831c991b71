"""Per-GPU training memory of many layouts at once, for `plan`: `calc.memory.training` in array form.

`train_memory` walks every layer of every stage for one layout (tens of ms for an 80-layer model);
`plan` needs it for thousands of layouts. The numbers here are the same sums from the same
building blocks (`stage_params`, `layer_saved`, `layer_bytes`, `item_bytes`, `default_bytes` and
`calc.memory.schedule`'s `in_flight`, `grads_resident`, `chunk_forwards`, `receive_buffers`), taken
apart along what each depends on:

- model states of stage s (weights, gradients, fp32 master and moments, ZeRO-3's gathered layers)
  depend on (tp, ep, etp, pp, the pipeline split, zero, dp x cp, edp) only, and their bytes per element on the framework and ZeRO
  (torch's FSDP2 keeps fp32 shards);
- activations are linear in the micro-batch's sequences (every saved item is per token, and unfused
  attention's S x S scores are per sequence), so they are kept per sequence and scaled by the
  micro-batch: stage s holds its layers' activations times its stage-equivalents in flight (each
  chunk's forwards in flight weighted by its share of the stage's layers: `in_flight` / vp when the
  chunks are equal) plus, once, the larger of the loss's logits temporaries and the working set of the
  layer being recomputed;
- the schedule's counts (chunk-forwards in flight and their stage-equivalents, whether gradients exist
  at the first backward, torch pipelining's receive buffers and kept outputs) depend on (pp, m, vp,
  the pipeline split) and are computed once per distinct tuple.

A stage's layers are a contiguous block of its count (even or Megatron-LM's uneven split,
calc.parallel.pipeline_split), as `train_memory` sums them.

Every stage's peak is the largest of `train_memory`'s phases (first backward, a later backward when
gradients were absent at the first, the backward's end on the embedding's stage, the optimizer step), for either framework; the search prices
1F1B (interleaved with vp > 1). tests/test_plan.py checks these totals against `train_memory` byte
for byte (within rounding) on dense, MoE, tied-embedding, ZeRO-3, full-recompute, pipelined and
interleaved layouts, for both frameworks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...specs.model import ModelSpec
from ..counts.activations import Saved, Split, item_bytes, layer_bytes, layer_saved
from ..parallel.shards import stage_params
from ..memory.schedule import (chunk_forwards, embedding_grad_blocks, grads_resident, grads_resident_at_end, in_flight,
                              receive_buffers)
from ..memory.training import _STATES, TrainOptions, default_bytes, embedding_table_bytes
from ..parallel.pipeline_split import EVEN, PipelineSplit, chunk_layers, stage_layer_ids
from ..parallel.tensor_parallel import kv_divisor
from ..precision.fp4 import low_precision
from ..precision.fp8 import fp8_linear_weights


@dataclass(frozen=True)
class StageStates:
    """Per stage (arrays of length pp): parameters by how ZeRO shards them."""

    dense: np.ndarray
    expert: np.ndarray
    total: np.ndarray
    gather: np.ndarray  # ZeRO-3 gathered weights: two layers and the root unit (parameters)
    fp8_linear: np.ndarray  # weight elements of the FP8 linears (calc.precision.fp8), whose FP8 copies fp8 keeps


@dataclass(frozen=True)
class Schedule:
    """Per stage (arrays of length pp) for one (pp, m, vp): the counts of `calc.memory.schedule` at each phase."""

    held: np.ndarray  # chunk-forwards in flight at the first backward
    equivalents: np.ndarray  # the stage's micro-batches of activations they hold then / at a later backward
    equivalents_later: np.ndarray
    grads: np.ndarray  # gradients exist then (bool)
    later: np.ndarray  # a later backward is a phase: gradients were absent at the first and held > 1
    saved: np.ndarray  # other micro-batches' kept log-probs at the first backward / a later one (last chunk's)
    saved_later: np.ndarray
    recv: np.ndarray  # receive buffers (stage-boundary tensors) at the first backward, a later one, the optimizer
    recv_later: np.ndarray
    recv_opt: np.ndarray


class MemoryTable:
    """Memoised pieces of `train_memory` for one model, sequence, dtype and framework."""

    def __init__(self, spec: ModelSpec, seq: int, dtype: str, capacity_factor: float = 1.0, flash: bool = True,
                 framework: str = "megatron", fp8_params: bool = False):
        self.spec, self.seq, self.capacity_factor, self.flash = spec, seq, capacity_factor, flash
        self.dtype, self.framework = dtype, framework
        self.fp8, self.fp8_params = low_precision(dtype), fp8_params  # TE's FP8/FP4 linears (calc.precision.fp8, train_fp4)
        self._states: dict[tuple, StageStates] = {}
        self._arrays: dict[tuple, Any] = {}  # activation bytes by (tp, cp, sp, recompute, pp)
        self._ids: dict[tuple, int] = {}  # a state or activation key -> its row in _rows
        self._rows: list[tuple[np.ndarray, ...]] = []
        self._saved: dict[bool, list[Saved]] = {}
        self._schedules: dict[tuple, Schedule] = {}

    def nbytes(self, zero: int = 0, tp: int = 1) -> dict[str, float]:
        """`default_bytes` of the framework: torch's depend on ZeRO-3 (FSDP2's fp32 shards) and tp (loss_parallel)."""
        return default_bytes(TrainOptions(dtype=self.dtype, framework=self.framework, zero=zero, tp=tp,
                                          fp8_params=self.fp8_params))

    def _layer_params(self, tp: int, ep: int, etp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per decoder layer: (dense, routed-expert, all) parameters per rank, `stage_params` of that one layer:
        a stage's sums are the sums of its layers', whatever pp (only the ends depend on which stage)."""
        key = ("layers", tp, ep, etp)
        if key not in self._arrays:
            rows = [stage_params(self.spec, (i,), False, False, tp, ep, 1, etp=etp) for i in range(self.spec.num_layers)]
            self._arrays[key] = tuple(np.array(c, dtype=np.int64) for c in zip(*(
                (p.dense, p.expert, p.largest_layer) for p in rows)))
        return self._arrays[key]

    def _fp8_linear(self, tp: int, ep: int, etp: int) -> list[float]:
        """Per decoder layer: weight elements of its FP8 linears per rank (calc.precision.fp8), once per (tp, ep, etp)."""
        key = ("fp8 layers", tp, ep, etp)
        if key not in self._arrays:
            self._arrays[key] = [fp8_linear_weights(self.spec, i, tp, ep, etp) for i in range(self.spec.num_layers)]
        return self._arrays[key]

    def blocks(self, pp: int, split: PipelineSplit) -> tuple[tuple[int, ...], np.ndarray]:
        """Decoder layers per stage (contiguous blocks, as train_memory sums them) and where each block starts."""
        key = ("blocks", pp, split)
        if key not in self._arrays:
            counts = tuple(map(len, stage_layer_ids(self.spec.num_layers, pp, 1, split)))
            self._arrays[key] = counts, np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        return self._arrays[key]

    def states(self, tp: int, ep: int, pp: int, split: PipelineSplit = EVEN, etp: int | None = None) -> StageStates:
        """Per stage: its layers' parameters (`_layer_params`) plus the ends it holds (`stage_params` of no
        layer: embedding on the first stage, final norm and head on the last); routed experts split over etp."""
        etp = tp if etp is None else etp
        key = (tp, ep, pp, split, etp)
        if key not in self._states:
            counts, starts = self.blocks(pp, split)
            dense, expert, largest = self._layer_params(tp, ep, etp)
            ends = [stage_params(self.spec, (), s == 0, s == pp - 1, tp, ep, pp) if s in (0, pp - 1) else None
                    for s in range(pp)]
            d = np.add.reduceat(dense, starts) + np.array([e.dense if e else 0 for e in ends])
            x = np.add.reduceat(expert, starts) + np.array([e.expert if e else 0 for e in ends])
            gather = 2 * np.maximum.reduceat(largest, starts) + np.array([e.root if e else 0 for e in ends])
            every = self._fp8_linear(tp, ep, etp) if self.fp8 else None
            # weight elements of the FP8 linears, summed per stage in layer order (as memory_train)
            fp8 = [sum(every[a:a + n]) if every else 0 for a, n in zip(starts.tolist(), counts)]
            self._states[key] = StageStates(*(np.asarray(c, dtype=float) for c in (d, x, d + x, gather, fp8)))
        return self._states[key]

    def state_bytes(self, tp: int, ep: int, pp: int, zero: int, shard: int, split: PipelineSplit = EVEN,
                    etp: int | None = None, expert_shard: int | None = None) -> tuple[np.ndarray, ...]:
        """Per stage: (weights + optimizer, gradients, ZeRO-3 gathered weights, embedding table) bytes (memory_train's
        sharding: dense parameters over shard = dp x cp, routed experts over expert_shard = edp, default
        shard / ep; the table only on the first stage)."""
        st, nb = self.states(tp, ep, pp, split, etp), self.nbytes(zero)
        experts = shard // ep if expert_shard is None else expert_shard

        def sharded(stage_min: int, per_param: float) -> np.ndarray:
            if zero < stage_min:
                return st.total * per_param
            return st.dense * per_param / shard + st.expert * per_param / experts

        kept = sharded(3, nb["weight"]) + sharded(1, nb["master"]) + sharded(1, _STATES["adamw"] * nb["state"])
        gather = st.gather * nb["gather"] if zero == 3 else np.zeros(pp)
        if self.fp8:  # FP8 weight copies; with FP8 parameters the weights themselves are 1 byte (ZeRO-3: of the shard)
            held = sharded(3, 1.0) / np.maximum(st.total, 1)  # memory_train._held_share
            kept = kept + st.fp8_linear * (nb["fp8_weight_copy"] - self.fp8_params * (nb["weight"] - nb["fp8"]) * held)
        table = np.zeros(pp)  # the embedding's rank only (memory_train.embedding_grad_bytes)
        table[0] = embedding_table_bytes(self.spec, tp, nb)
        return kept, sharded(2, nb["grad"]), gather, table

    def _layer_items(self, layer: int) -> list[Saved]:
        moe = self.spec.layer_is_moe(layer)
        if moe not in self._saved:
            self._saved[moe] = layer_saved(self.spec, layer, self.flash, False, self.capacity_factor, self.fp8)
        return self._saved[moe]

    def _per_layer(self, split: Split, nb: dict[str, float], recompute: str) -> np.ndarray:
        """layer_bytes of every layer, priced once per kind of layer (dense, MoE): nothing else differs."""
        kinds = [self.spec.layer_is_moe(i) for i in range(self.spec.num_layers)]
        first = {kind: kinds.index(kind) for kind in set(kinds)}
        value = {kind: layer_bytes(self._layer_items(i), split, nb, recompute, self.spec.hidden_size)
                 for kind, i in first.items()}
        return np.array([value[kind] for kind in kinds])

    def activation_bytes(self, tp: int, cp: int, sp: bool, recompute: str, pp: int,
                         pipeline: PipelineSplit = EVEN, etp: int | None = None) -> tuple[np.ndarray, ...]:
        """Per stage, for ONE sequence per micro-batch: (bytes held per micro-batch in flight, bytes held once:
        max(logits temporaries, recompute working set), the loss's logits on this rank, one stage-boundary tensor)."""
        etp = tp if etp is None else etp
        key = (tp, cp, sp, recompute, pp, pipeline, etp)
        if key not in self._arrays:
            kept, whole, logits, head, boundary = self._layer_activations(tp, cp, sp, recompute, etp)
            starts = self.blocks(pp, pipeline)[1]
            in_flight = np.add.reduceat(kept, starts)
            working = np.maximum.reduceat(whole, starts) if recompute == "full" else np.zeros(pp)
            logit_count = np.zeros(pp)
            logit_count[-1] = logits
            in_flight[-1] += head
            nb = self.nbytes(0, tp)
            self._arrays[key] = (in_flight, np.maximum(logit_count * nb["logits"], working), logit_count, boundary)
        return self._arrays[key]

    def _layer_activations(self, tp: int, cp: int, sp: bool, recompute: str, etp: int) -> tuple[Any, ...]:
        """For ONE sequence per micro-batch, whatever the pipeline: each layer's kept and whole activation bytes,
        the loss's logits on a rank, the final norm and lm_head inputs, one stage-boundary tensor."""
        key = ("layer acts", tp, cp, sp, recompute, etp)
        if key not in self._arrays:
            spec, nb = self.spec, self.nbytes(0, tp)
            local = self.seq // cp
            split = Split(tokens=local, keys=local, tp=tp, sp=sp, kv_div=kv_divisor(spec, tp), etp=etp)
            self._arrays[key] = (
                self._per_layer(split, nb, recompute), self._per_layer(split, nb, "none"),
                split.tokens * -(-spec.vocab_size // tp),
                item_bytes(Saved("final norm + lm_head inputs", 2 * spec.embed_dim, "seq"), split, nb),
                item_bytes(Saved("stage boundary", spec.hidden_size, "seq"), split, nb))
        return self._arrays[key]

    def schedule(self, pp: int, m: int, vp: int, zero: int, replicas: int, split: PipelineSplit = EVEN) -> Schedule:
        """`calc.memory.schedule`'s counts per stage for 1F1B (interleaved with vp > 1)."""
        key = (pp, m, vp, self.framework == "torch" and zero == 0 and replicas > 1, split)
        if key not in self._schedules:
            rows, chunks = [], chunk_layers(self.spec.num_layers, pp, vp, split)

            def equivalents(s: int, held: int) -> float:  # as memory_train weighs each chunk's forwards
                return sum(chunk_forwards(held, pp, vp, c) * n for c, n in enumerate(chunks[s])) / sum(chunks[s])
            for s in range(pp):
                held = in_flight("1f1b", pp, s, m, vp)
                grads = grads_resident(self.framework, "1f1b", held, m * vp, zero, replicas)
                later = max(held - 1, 0)
                rows.append((held, equivalents(s, held), equivalents(s, later), grads, not grads and held > 1,
                             max(chunk_forwards(held, pp, vp, vp - 1) - 1, 0),
                             max(chunk_forwards(later, pp, vp, vp - 1) - 1, 0),
                             receive_buffers(self.framework, pp, s, held, m, vp),
                             receive_buffers(self.framework, pp, s, later, m, vp),
                             receive_buffers(self.framework, pp, s, 0, m, vp)))
            self._schedules[key] = Schedule(*(np.array(c) for c in zip(*rows)))
        return self._schedules[key]

    def _row(self, key: tuple, make: Any) -> int:
        if key not in self._ids:
            self._ids[key] = len(self._rows)
            self._rows.append(make())
        return self._ids[key]

    def state_key(self, tp: int, ep: int, pp: int, zero: int, shard: int, split: PipelineSplit = EVEN,
                  etp: int | None = None, expert_shard: int | None = None) -> int:
        """The row of `state_bytes` for `peak_bytes`."""
        return self._row(("states", tp, ep, pp, zero, shard, split, etp, expert_shard),
                         lambda: self.state_bytes(tp, ep, pp, zero, shard, split, etp, expert_shard))

    def activation_key(self, tp: int, cp: int, sp: bool, recompute: str, pp: int, split: PipelineSplit = EVEN,
                       etp: int | None = None) -> int:
        """The row of `activation_bytes` for `peak_bytes`."""
        return self._row(("acts", tp, cp, sp, recompute, pp, split, etp),
                         lambda: self.activation_bytes(tp, cp, sp, recompute, pp, split, etp))

    def _gather(self, keys: Any, count: int) -> list[np.ndarray]:
        """The first `count` arrays of each row in `keys`, stacked (one row per entry of `keys`)."""
        rows, inverse = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
        return [np.stack([self._rows[r][i] for r in rows.tolist()])[inverse.reshape(-1)] for i in range(count)]

    def peak_bytes(self, pp: int, state_keys: Any, activation_keys: Any, micro_batch: np.ndarray,
                   micro_batches: np.ndarray, vp: np.ndarray, zero: np.ndarray, replicas: np.ndarray,
                   split: PipelineSplit = EVEN) -> np.ndarray:
        """Memory per GPU of the peak stage at its peak phase (as `train_memory`), for layouts of `pp` stages split
        by `split`, given by their `state_key` and `activation_key` rows (one entry each) and their schedule (m, vp,
        ZeRO, dp x cp)."""
        kept, grads, gather, table = self._gather(state_keys, 4)
        *acts, boundary = self._gather(activation_keys, 4)
        boundary = boundary[:, None]
        ddp = (self.framework == "torch") & (zero == 0) & (replicas > 1)
        code = (micro_batches.astype(np.int64) * (int(vp.max()) + 1) + vp) * 2 + ddp  # one int per (m, vp, ddp)
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        sch = [self.schedule(pp, int(micro_batches[i]), int(vp[i]), 0 if ddp[i] else 3, 2, split)
               for i in first.tolist()]
        col = {f: np.stack([getattr(s, f) for s in sch])[inverse.reshape(-1)] for f in Schedule.__dataclass_fields__}
        b = micro_batch[:, None]
        nb = self.nbytes()
        out_kept = np.where(pp > 1, micro_batches[:, None] * b * acts[2] * nb["logits_kept"], 0.0)
        fixed = kept + out_kept

        def phase(held: np.ndarray, mbs: np.ndarray, with_grads: Any, saved: np.ndarray,
                  recv: np.ndarray) -> np.ndarray:
            busy = held > 0
            return (fixed + np.where(with_grads, grads, 0.0) + np.where(busy, gather, 0.0)
                    + b * (mbs * acts[0] + np.where(busy, acts[1], 0.0) + saved * acts[2] * nb["logits_saved"])
                    + recv * b * boundary)

        first = phase(col["held"], col["equivalents"], col["grads"], col["saved"], col["recv"])
        later = np.where(col["later"], phase(col["held"] - 1, col["equivalents_later"], True, col["saved_later"],
                                             col["recv_later"]), 0.0)
        none = np.zeros_like(col["held"])
        optimizer = phase(none, none, True, none, col["recv_opt"])
        # the backward's end on the embedding's stage (memory_train: embedding_grad_blocks x the table)
        resident = grads_resident_at_end(self.framework, micro_batches * vp, replicas)
        tied, fusion = self.spec.tie_word_embeddings and pp == 1, self.framework == "megatron"
        blocks = np.where(resident, embedding_grad_blocks(tied, fusion, True), embedding_grad_blocks(tied, fusion, False))
        end = optimizer + blocks[:, None] * table
        return np.maximum(np.maximum(np.maximum(first, later), optimizer), end).max(axis=1)

    def total_bytes(self, *, tp: int, ep: int, pp: int, cp: int, sp: bool, zero: int, shard: int, recompute: str,
                    micro_batch: int, micro_batches: int, vp: int, split: PipelineSplit = EVEN,
                    etp: int | None = None, expert_shard: int | None = None) -> float:
        """Memory per GPU of one layout (see `peak_bytes`); shard = dp x cp, expert_shard = edp (default shard / ep)."""
        return float(self.peak_bytes(pp, [self.state_key(tp, ep, pp, zero, shard, split, etp, expert_shard)],
                                     [self.activation_key(tp, cp, sp, recompute, pp, split, etp)], np.array([micro_batch]),
                                     np.array([micro_batches]), np.array([vp]), np.array([zero]),
                                     np.array([shard]), split)[0])
