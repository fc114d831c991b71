"""Per-GPU training memory of many layouts at once, for `plan`: `calc.memory_train` in array form.

`train_memory` walks every layer of every stage for one layout (tens of ms for an 80-layer model);
`plan` needs it for thousands of layouts. The numbers here are the same sums from the same
building blocks (`stage_params`, `layer_saved`, `layer_bytes`, `item_bytes`, `default_bytes` and
`calc.memory_schedule`'s `in_flight`, `grads_resident`, `chunk_forwards`, `receive_buffers`), taken
apart along what each depends on:

- model states of stage s (weights, gradients, fp32 master and moments, ZeRO-3's gathered layers)
  depend on (tp, ep, pp, zero, dp x cp) only, and their bytes per element on the framework and ZeRO
  (torch's FSDP2 keeps fp32 shards);
- activations are linear in the micro-batch's sequences (every saved item is per token, and unfused
  attention's S x S scores are per sequence), so they are kept per sequence and scaled by the
  micro-batch: stage s holds `in_flight` chunk-forwards / vp of its layers' activations plus, once,
  the larger of the loss's logits temporaries and the working set of the layer being recomputed;
- the schedule's counts (chunk-forwards in flight, whether gradients exist at the first backward,
  torch pipelining's receive buffers and kept outputs) depend on (pp, m, vp) and are computed once
  per distinct triple.

Every stage's peak is the largest of `train_memory`'s phases (first backward, a later backward when
gradients were absent at the first, the optimizer step), for either framework; the search prices
1F1B (interleaved with vp > 1). tests/test_plan.py checks these totals against `train_memory` byte
for byte (within rounding) on dense, MoE, tied-embedding, ZeRO-3, full-recompute, pipelined and
interleaved layouts, for both frameworks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import dtype_name
from ..specs.model import ModelSpec
from .activations import Saved, Split, item_bytes, layer_bytes, layer_saved
from .memory_common import stage_params
from .memory_schedule import chunk_forwards, grads_resident, in_flight, receive_buffers
from .memory_train import _STATES, TrainOptions, default_bytes
from .tensor_parallel import kv_divisor
from .train_fp8 import fp8_linear_weights


@dataclass(frozen=True)
class StageStates:
    """Per stage (arrays of length pp): parameters by how ZeRO shards them."""

    dense: np.ndarray
    expert: np.ndarray
    total: np.ndarray
    gather: np.ndarray  # ZeRO-3 gathered weights: two layers and the root unit (parameters)
    fp8_linear: np.ndarray  # weight elements of the FP8 linears (calc.train_fp8), whose FP8 copies fp8 keeps


@dataclass(frozen=True)
class Schedule:
    """Per stage (arrays of length pp) for one (pp, m, vp): the counts of `calc.memory_schedule` at each phase."""

    held: np.ndarray  # chunk-forwards in flight at the first backward
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
        self.fp8, self.fp8_params = dtype_name(dtype) == "fp8", fp8_params  # Transformer Engine's FP8 (calc.train_fp8)
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

    def _layer_params(self, tp: int, ep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per decoder layer: (dense, routed-expert, all) parameters per rank, `stage_params` of that one layer:
        a stage's sums are the sums of its layers', whatever pp (only the ends depend on which stage)."""
        key = ("layers", tp, ep)
        if key not in self._arrays:
            rows = [stage_params(self.spec, (i,), False, False, tp, ep, 1) for i in range(self.spec.num_layers)]
            self._arrays[key] = tuple(np.array(c, dtype=np.int64) for c in zip(*(
                (p.dense, p.expert, p.largest_layer) for p in rows)))
        return self._arrays[key]

    def _fp8_linear(self, tp: int, ep: int) -> list[float]:
        """Per decoder layer: weight elements of its FP8 linears per rank (calc.train_fp8), once per (tp, ep)."""
        key = ("fp8 layers", tp, ep)
        if key not in self._arrays:
            self._arrays[key] = [fp8_linear_weights(self.spec, i, tp, ep) for i in range(self.spec.num_layers)]
        return self._arrays[key]

    def states(self, tp: int, ep: int, pp: int) -> StageStates:
        """Per stage: its layers' parameters (`_layer_params`) plus the ends it holds (`stage_params` of no
        layer: embedding on the first stage, final norm and head on the last)."""
        key = (tp, ep, pp)
        if key not in self._states:
            dense, expert, largest = (a.reshape(pp, -1) for a in self._layer_params(tp, ep))
            ends = [stage_params(self.spec, (), s == 0, s == pp - 1, tp, ep, pp) if s in (0, pp - 1) else None
                    for s in range(pp)]
            d = dense.sum(axis=1) + np.array([e.dense if e else 0 for e in ends])
            x = expert.sum(axis=1) + np.array([e.expert if e else 0 for e in ends])
            gather = 2 * largest.max(axis=1) + np.array([e.root if e else 0 for e in ends])
            per, every = self.spec.num_layers // pp, self._fp8_linear(tp, ep) if self.fp8 else None
            # weight elements of the FP8 linears, summed per stage in layer order (as memory_train)
            fp8 = [sum(every[s * per:(s + 1) * per]) if every else 0 for s in range(pp)]
            self._states[key] = StageStates(*(np.asarray(c, dtype=float) for c in (d, x, d + x, gather, fp8)))
        return self._states[key]

    def state_bytes(self, tp: int, ep: int, pp: int, zero: int, shard: int) -> tuple[np.ndarray, ...]:
        """Per stage: (weights + optimizer, gradients, ZeRO-3 gathered weights) bytes (memory_train's sharding)."""
        st, nb = self.states(tp, ep, pp), self.nbytes(zero)

        def sharded(stage_min: int, per_param: float) -> np.ndarray:
            if zero < stage_min:
                return st.total * per_param
            return st.dense * per_param / shard + st.expert * per_param / (shard // ep)

        kept = sharded(3, nb["weight"]) + sharded(1, nb["master"]) + sharded(1, _STATES["adamw"] * nb["state"])
        gather = st.gather * nb["gather"] if zero == 3 else np.zeros(pp)
        if self.fp8:  # FP8 weight copies; with FP8 parameters the weights themselves are 1 byte
            kept = kept + st.fp8_linear * (nb["fp8_weight_copy"] - self.fp8_params * (nb["weight"] - nb["fp8"]))
        return kept, sharded(2, nb["grad"]), gather

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

    def activation_bytes(self, tp: int, cp: int, sp: bool, recompute: str, pp: int) -> tuple[np.ndarray, ...]:
        """Per stage, for ONE sequence per micro-batch: (bytes held per micro-batch in flight, bytes held once:
        max(logits temporaries, recompute working set), the loss's logits on this rank, one stage-boundary tensor)."""
        key = (tp, cp, sp, recompute, pp)
        if key not in self._arrays:
            spec, nb = self.spec, self.nbytes(0, tp)
            local = self.seq // cp
            split = Split(tokens=local, keys=local, tp=tp, sp=sp, kv_div=kv_divisor(spec, tp))
            kept, whole = self._per_layer(split, nb, recompute), self._per_layer(split, nb, "none")
            per = spec.num_layers // pp
            in_flight = kept.reshape(pp, per).sum(axis=1)
            working = whole.reshape(pp, per).max(axis=1) if recompute == "full" else np.zeros(pp)
            logit_count = np.zeros(pp)
            logit_count[-1] = split.tokens * -(-spec.vocab_size // tp)
            in_flight[-1] += item_bytes(Saved("final norm + lm_head inputs", 2 * spec.embed_dim, "seq"), split, nb)
            boundary = item_bytes(Saved("stage boundary", spec.hidden_size, "seq"), split, nb)
            self._arrays[key] = (in_flight, np.maximum(logit_count * nb["logits"], working), logit_count, boundary)
        return self._arrays[key]

    def schedule(self, pp: int, m: int, vp: int, zero: int, replicas: int) -> Schedule:
        """`calc.memory_schedule`'s counts per stage for 1F1B (interleaved with vp > 1)."""
        key = (pp, m, vp, self.framework == "torch" and zero == 0 and replicas > 1)
        if key not in self._schedules:
            rows = []
            for s in range(pp):
                held = in_flight("1f1b", pp, s, m, vp)
                grads = grads_resident(self.framework, "1f1b", held, m * vp, zero, replicas)
                later = max(held - 1, 0)
                rows.append((held, grads, not grads and held > 1,
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

    def state_key(self, tp: int, ep: int, pp: int, zero: int, shard: int) -> int:
        """The row of `state_bytes` for `peak_bytes`."""
        return self._row(("states", tp, ep, pp, zero, shard), lambda: self.state_bytes(tp, ep, pp, zero, shard))

    def activation_key(self, tp: int, cp: int, sp: bool, recompute: str, pp: int) -> int:
        """The row of `activation_bytes` for `peak_bytes`."""
        return self._row(("acts", tp, cp, sp, recompute, pp), lambda: self.activation_bytes(tp, cp, sp, recompute, pp))

    def _gather(self, keys: Any, count: int) -> list[np.ndarray]:
        """The first `count` arrays of each row in `keys`, stacked (one row per entry of `keys`)."""
        rows, inverse = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
        return [np.stack([self._rows[r][i] for r in rows.tolist()])[inverse.reshape(-1)] for i in range(count)]

    def peak_bytes(self, pp: int, state_keys: Any, activation_keys: Any, micro_batch: np.ndarray,
                   micro_batches: np.ndarray, vp: np.ndarray, zero: np.ndarray, replicas: np.ndarray) -> np.ndarray:
        """Memory per GPU of the peak stage at its peak phase (as `train_memory`), for layouts of `pp` stages given
        by their `state_key` and `activation_key` rows (one entry each) and their schedule (m, vp, ZeRO, dp x cp)."""
        kept, grads, gather = self._gather(state_keys, 3)
        *acts, boundary = self._gather(activation_keys, 4)
        boundary = boundary[:, None]
        ddp = (self.framework == "torch") & (zero == 0) & (replicas > 1)
        code = (micro_batches.astype(np.int64) * (int(vp.max()) + 1) + vp) * 2 + ddp  # one int per (m, vp, ddp)
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        sch = [self.schedule(pp, int(micro_batches[i]), int(vp[i]), 0 if ddp[i] else 3, 2) for i in first.tolist()]
        col = {f: np.stack([getattr(s, f) for s in sch])[inverse.reshape(-1)] for f in Schedule.__dataclass_fields__}
        b, v = micro_batch[:, None], vp[:, None]
        nb = self.nbytes()
        out_kept = np.where(pp > 1, micro_batches[:, None] * b * acts[2] * nb["logits_kept"], 0.0)
        fixed = kept + out_kept

        def phase(held: np.ndarray, with_grads: Any, saved: np.ndarray, recv: np.ndarray) -> np.ndarray:
            busy = held > 0
            return (fixed + np.where(with_grads, grads, 0.0) + np.where(busy, gather, 0.0)
                    + b * (held / v * acts[0] + np.where(busy, acts[1], 0.0) + saved * acts[2] * nb["logits_saved"])
                    + recv * b * boundary)

        first = phase(col["held"], col["grads"], col["saved"], col["recv"])
        later = np.where(col["later"], phase(col["held"] - 1, True, col["saved_later"], col["recv_later"]), 0.0)
        optimizer = phase(np.zeros_like(col["held"]), True, np.zeros_like(col["saved"]), col["recv_opt"])
        return np.maximum(np.maximum(first, later), optimizer).max(axis=1)

    def total_bytes(self, *, tp: int, ep: int, pp: int, cp: int, sp: bool, zero: int, shard: int, recompute: str,
                    micro_batch: int, micro_batches: int, vp: int) -> float:
        """Memory per GPU of one layout (see `peak_bytes`); shard = dp x cp."""
        return float(self.peak_bytes(pp, [self.state_key(tp, ep, pp, zero, shard)],
                                     [self.activation_key(tp, cp, sp, recompute, pp)], np.array([micro_batch]),
                                     np.array([micro_batches]), np.array([vp]), np.array([zero]),
                                     np.array([shard]))[0])
