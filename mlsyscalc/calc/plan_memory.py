"""Per-GPU training memory of many layouts at once, for `plan`: `calc.memory_train` in array form.

`train_memory` walks every layer of every stage for one layout (tens of ms for an 80-layer model);
`plan` needs it for thousands of layouts. The numbers here are the same sums from the same
building blocks (`stage_params`, `layer_saved`, `layer_bytes`, `item_bytes`, `default_bytes`), taken
apart along what each depends on:

- model states of stage s (weights, gradients, fp32 master and moments, ZeRO-3's gathered layers)
  depend on (tp, ep, pp, zero, dp x cp) only;
- activations are linear in the micro-batch's sequences (every saved item is per token, and unfused
  attention's S x S scores are per sequence), so they are kept per sequence and scaled by the
  micro-batch: stage s holds
  min(pp - s, m) micro-batches of its layers' activations (1F1B) plus, once, the larger of the
  loss's logits temporaries and the working set of the layer being recomputed (with vp model chunks,
  `calc.memory_schedule.in_flight` chunk-forwards / vp). The search prices the default framework
  (persistent gradients) and 1F1B: the start of backward is then every stage's peak phase.

tests/test_plan.py checks these totals against `train_memory` byte for byte (within rounding) on
dense, MoE, tied-embedding, ZeRO-3, full-recompute and pipelined layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..specs.model import ModelSpec
from .activations import Saved, Split, item_bytes, layer_bytes, layer_saved
from .memory_common import stage_layers, stage_params
from .memory_train import _STATES, TrainOptions, default_bytes
from .tensor_parallel import kv_divisor


@dataclass(frozen=True)
class StageStates:
    """Per stage (arrays of length pp): parameters by how ZeRO shards them."""

    dense: np.ndarray
    expert: np.ndarray
    total: np.ndarray
    gather: np.ndarray  # ZeRO-3 gathered weights: two layers and the root unit (parameters)


class MemoryTable:
    """Memoised pieces of `train_memory` for one model, sequence and dtype."""

    def __init__(self, spec: ModelSpec, seq: int, dtype: str, capacity_factor: float = 1.0, flash: bool = True):
        self.spec, self.seq, self.capacity_factor, self.flash = spec, seq, capacity_factor, flash
        self.nbytes = default_bytes(TrainOptions(dtype=dtype))
        self._states: dict[tuple, StageStates] = {}
        self._arrays: dict[tuple, Any] = {}  # state bytes and activation bytes by key
        self._saved: dict[bool, list[Saved]] = {}

    def states(self, tp: int, ep: int, pp: int) -> StageStates:
        key = (tp, ep, pp)
        if key not in self._states:
            spec, cols = self.spec, []
            for s in range(pp):
                p = stage_params(spec, stage_layers(spec.num_layers, pp, s), s == 0, s == pp - 1, tp, ep, pp)
                cols.append((p.dense, p.expert, p.total, 2 * p.largest_layer + p.root))
            self._states[key] = StageStates(*(np.array(c, dtype=float) for c in zip(*cols)))
        return self._states[key]

    def state_bytes(self, tp: int, ep: int, pp: int, zero: int, shard: int) -> np.ndarray:
        """Weights + gradients + optimizer + ZeRO-3 temporaries per stage (memory_train's sharding)."""
        st, nb = self.states(tp, ep, pp), self.nbytes

        def sharded(stage_min: int, per_param: float) -> np.ndarray:
            if zero < stage_min:
                return st.total * per_param
            return st.dense * per_param / shard + st.expert * per_param / (shard // ep)

        out = sharded(3, nb["weight"]) + sharded(2, nb["grad"]) + sharded(1, nb["master"])
        out = out + sharded(1, _STATES["adamw"] * nb["state"])
        return out + (st.gather * nb["weight"] if zero == 3 else 0.0)

    def _layer_items(self, layer: int) -> list[Saved]:
        moe = self.spec.layer_is_moe(layer)
        if moe not in self._saved:
            self._saved[moe] = layer_saved(self.spec, layer, self.flash, False, self.capacity_factor)
        return self._saved[moe]

    def activation_bytes(self, tp: int, cp: int, sp: bool, recompute: str, pp: int) -> tuple[np.ndarray, np.ndarray]:
        """Per stage, for ONE sequence per micro-batch: (bytes held per micro-batch in flight,
        bytes held once: max(logits temporaries, recompute working set))."""
        key = (tp, cp, sp, recompute, pp)
        if key not in self._arrays:
            spec, nb = self.spec, self.nbytes
            local = self.seq // cp
            split = Split(tokens=local, keys=local, tp=tp, sp=sp, kv_div=kv_divisor(spec, tp))
            kept = np.array([layer_bytes(self._layer_items(i), split, nb, recompute, spec.hidden_size)
                             for i in range(spec.num_layers)])
            whole = np.array([layer_bytes(self._layer_items(i), split, nb, "none", spec.hidden_size)
                              for i in range(spec.num_layers)])
            per = spec.num_layers // pp
            in_flight = kept.reshape(pp, per).sum(axis=1)
            working = whole.reshape(pp, per).max(axis=1) if recompute == "full" else np.zeros(pp)
            logits = np.zeros(pp)
            logits[-1] = split.tokens * -(-spec.vocab_size // tp) * nb["logits"]
            in_flight[-1] += item_bytes(Saved("final norm + lm_head inputs", 2 * spec.embed_dim, "seq"), split, nb)
            self._arrays[key] = (in_flight, np.maximum(logits, working))
        return self._arrays[key]

    def state_key(self, tp: int, ep: int, pp: int, zero: int, shard: int) -> tuple:
        key = ("states", tp, ep, pp, zero, shard)
        if key not in self._arrays:
            self._arrays[key] = self.state_bytes(tp, ep, pp, zero, shard)
        return key

    def activation_key(self, tp: int, cp: int, sp: bool, recompute: str, pp: int) -> tuple:
        self.activation_bytes(tp, cp, sp, recompute, pp)
        return (tp, cp, sp, recompute, pp)

    def peak_bytes(self, pp: int, state_keys: list, activation_keys: list, micro_batch: np.ndarray,
                   micro_batches: np.ndarray, vp: np.ndarray) -> np.ndarray:
        """Memory per GPU of the peak stage, with the interleaved schedule's chunks in flight (as memory_train), for
        layouts of `pp` stages given by their `state_key` and `activation_key` (one entry each)."""
        states = np.stack([self._arrays[k] for k in state_keys])  # (n, pp)
        in_flight = np.stack([self._arrays[k][0] for k in activation_keys])
        once = np.stack([self._arrays[k][1] for k in activation_keys])
        stage, m, v = np.arange(pp)[None, :], micro_batches[:, None], vp[:, None]
        # calc.memory_schedule.in_flight in stage-equivalents: 1F1B min(pp - s, m); interleaved chunk-forwards / vp
        chunks = np.minimum(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v)
        held = np.where(v > 1, chunks / v, np.minimum(pp - stage, m))
        return (states + micro_batch[:, None] * (held * in_flight + once)).max(axis=1)

    def total_bytes(self, *, tp: int, ep: int, pp: int, cp: int, sp: bool, zero: int, shard: int, recompute: str,
                    micro_batch: int, micro_batches: int, vp: int) -> float:
        """Memory per GPU of one layout (see `peak_bytes`)."""
        return float(self.peak_bytes(pp, [self.state_key(tp, ep, pp, zero, shard)],
                                     [self.activation_key(tp, cp, sp, recompute, pp)], np.array([micro_batch]),
                                     np.array([micro_batches]), np.array([vp]))[0])
