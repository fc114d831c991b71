"""Per-GPU training memory of many layouts at once, for `plan`: `calc.memory_train` in array form.

`train_memory` walks every layer of every stage for one layout (tens of ms for an 80-layer model);
`plan` needs it for thousands of layouts. The numbers here are the same sums from the same
building blocks (`stage_params`, `layer_saved`, `layer_bytes`, `item_bytes`, `default_bytes`), taken
apart along what each depends on:

- model states of stage s (weights, gradients, fp32 master and moments, ZeRO-3's gathered layers)
  depend on (tp, ep, pp, zero, dp x cp) only;
- activations are linear in the micro-batch's tokens (every saved item is per token with flash
  attention), so they are kept per sequence and scaled by the micro-batch: stage s holds
  min(pp - s, m) micro-batches of its layers' activations (1F1B) plus, once, the larger of the
  loss's logits temporaries and the working set of the layer being recomputed.

tests/test_plan.py checks these totals against `train_memory` byte for byte (within rounding) on
dense, MoE, tied-embedding, ZeRO-3, full-recompute and pipelined layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def __init__(self, spec: ModelSpec, seq: int, dtype: str, capacity_factor: float = 1.0):
        self.spec, self.seq, self.capacity_factor = spec, seq, capacity_factor
        self.nbytes = default_bytes(TrainOptions(dtype=dtype))
        self._states: dict[tuple, StageStates] = {}
        self._acts: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
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
            self._saved[moe] = layer_saved(self.spec, layer, True, False, self.capacity_factor)
        return self._saved[moe]

    def activation_bytes(self, tp: int, cp: int, sp: bool, recompute: str, pp: int) -> tuple[np.ndarray, np.ndarray]:
        """Per stage, for ONE sequence per micro-batch: (bytes held per micro-batch in flight,
        bytes held once: max(logits temporaries, recompute working set))."""
        key = (tp, cp, sp, recompute, pp)
        if key not in self._acts:
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
            self._acts[key] = (in_flight, np.maximum(logits, working))
        return self._acts[key]

    def total_bytes(self, *, tp: int, ep: int, pp: int, cp: int, sp: bool, zero: int, shard: int, recompute: str,
                    micro_batch: int, micro_batches: int, vp: int) -> float:
        """Memory per GPU of the peak stage, with the interleaved schedule's share (as calc.train)."""
        states = self.state_bytes(tp, ep, pp, zero, shard)
        in_flight, once = self.activation_bytes(tp, cp, sp, recompute, pp)
        held = np.minimum(pp - np.arange(pp), micro_batches)
        acts = micro_batch * (held * in_flight + once)
        totals = states + acts
        peak = int(np.argmax(totals))
        extra = micro_batch * held[peak] * in_flight[peak] * (pp - 1) / (pp * vp) if vp > 1 else 0.0
        return float(totals[peak] + extra)
