"""Static (request-level) batching for calc.serve.engine: FasterTransformer-style batches.

When the engine is empty it takes the waiting requests (up to max_seqs, while their prompt + output
KV reservations fit), prefills them padded to the longest prompt, then decodes the whole padded
batch until the longest output is done; shorter requests finish early but their rows keep running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .iteration import Batch, kv_blocks

if TYPE_CHECKING:
    from .workload import Requests

# `e` below is a calc.serve.engine.Engine and run_static returns its Trace; typed Any because
# serve_engine imports this module (importing it back, even for types, would be a circle)


def _take_batch(e: Any, first: int, now: float) -> list[int]:
    lim, req = e.lim, e.req
    batch: list[int] = []
    blocks, j = 0, first
    while j < len(req) and req[j][0] <= now and len(batch) < lim.max_seqs:
        need = kv_blocks(req[j][1] + req[j][2], lim.block_size)
        if blocks + need > lim.total_blocks:
            break
        batch.append(j)
        blocks += need
        j += 1
    return batch


def run_static(e: Any) -> Any:
    """Simulate static batching over the engine's requests; fills and returns e.trace."""
    req, t, cost = e.req, e.trace, e.cost
    now, nxt, busy, done, seen = 0.0, 0, 0.0, 0, 0
    while nxt < len(req):
        now = max(now, req[nxt][0])
        batch = _take_batch(e, nxt, now)
        nxt += len(batch)
        b, longest, steps = len(batch), max(req[i][1] for i in batch), max(req[i][2] for i in batch)
        blocks = sum(kv_blocks(req[i][1] + req[i][2], e.lim.block_size) for i in batch)
        finish_at: dict[int, list[int]] = {}
        for i in batch:
            e.sched_s[i] = now
            finish_at.setdefault(req[i][2] - 1, []).append(i)
        for step in range(steps):
            if step == 0:
                x = Batch(tokens=b * longest, samples=b, prefill_tokens=b * longest,
                          prefill_pairs=b * longest * longest / 2, prefill_keys=b * longest)
            else:  # every padded row decodes: keys = longest prompt + step
                x = Batch(tokens=b, samples=b, decodes=b, decode_keys=b * (longest + step))
            dt = cost.time_s(x)
            now += dt
            busy += dt
            if step == 0:
                for i in batch:
                    e.first_s[i] = now
            for i in finish_at.get(step, ()):
                e.finish_s[i] = now
            done += len(finish_at.get(step, ()))
            seen = _arrived(req, max(seen, nxt), now)
            t.iter_end_s.append(now)
            t.iter_used_blocks.append(blocks)
            t.iter_batch_tokens.append(x.tokens)
            t.iter_in_system.append(seen - done)
    t.busy_s = busy
    return t


def _arrived(req: Requests, start: int, now: float) -> int:
    """Requests arrived by `now` (those before `start` all have)."""
    j = start
    while j < len(req) and req[j][0] <= now:
        j += 1
    return j
