"""Discrete-event simulation of an LLM serving engine, one iteration (one forward pass) at a time.

Schedulers (a row of `POLICIES` each):

- static: FasterTransformer-style request batching. When the engine is empty it takes up to
  max_seqs waiting requests, prefills them padded to the longest prompt, and decodes all of them
  (padded, finished ones included) until the longest output is done.
- orca: iteration-level scheduling (Yu et al., OSDI 2022): every iteration runs the decodes of all
  running requests plus the whole prompts of newly admitted ones; KV space for prompt + output is
  reserved on admission (the "oracle" reservation of the vLLM paper, section 6.2), so no preemption.
- vllm: PagedAttention (Kwon et al., SOSP 2023): KV in blocks of block_size tokens allocated as
  sequences grow; an iteration is either the prefill of newly admitted prompts (prefill first) or one
  decode step of every running sequence; when a decode step lacks blocks the latest admitted sequence
  is preempted (recompute: its KV is dropped and prompt + generated tokens are prefilled again later;
  swap: its blocks go to host memory over PCIe and come back before new admissions).
- sarathi: chunked prefill with stall-free batching (Agrawal et al., OSDI 2024): every iteration runs
  all decodes plus prefill chunks up to a token budget of `chunk` tokens; paged KV as vllm.
- vllm-v1: vLLM V1's scheduler (vllm/v1/core/sched/scheduler.py, `Scheduler.schedule`): one token
  budget of `max_batch_tokens` a step, spent on the running requests first (decodes, then the
  partly prefilled prompt) and then on waiting prompts in arrival order, chunked to what is left;
  paged KV without the V0 block manager's watermark. (V1 admits no waiting request in a step that
  preempted; here the preempted request heads the queue and never fits back in that step, so no
  request behind it is admitted either: the same rule.)

A closed loop of `concurrency` clients (vLLM's benchmark_serving --max-concurrency, genai-perf's
--concurrency) releases request k + concurrency when the k-th request finishes, at that moment
(or at its own arrival time, whichever is later).

A request reaches the scheduler `frontend_s` after the API server takes it up, and the server takes up
one request at a time in arrival order (the OpenAI-compatible frontend's parsing, chat template and
tokenisation, and any proxy before it): engine arrival = max(client arrival, the previous request's
engine arrival) + frontend_s. TTFT and end-to-end latency count from the client's arrival. 0 (the
default): requests reach the scheduler when they are sent.

Per-iteration time is `IterationCost.time_s` of the batch formed. Decoding sequences are kept as
sums (count, total keys, per-phase block counters) and a heap of finish steps, so one iteration
costs O(admissions + finishes), not O(batch).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import replace
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import require
from .iteration import IterationCost, kv_blocks

if TYPE_CHECKING:
    from .workload import Requests

WATERMARK = 0.01  # vLLM keeps 1% of the KV blocks free when admitting prompts (block_manager watermark)


@dataclass(frozen=True)
class Policy:
    """A scheduler as the flags the engine reads (a new scheduler is a new row, never a test of its name)."""

    mixed: bool  # prefills and decodes share an iteration
    paged: bool  # KV grows block by block (else reserved for prompt + output on admission)
    chunked: bool  # prefills split into chunks under a per-iteration token budget
    chunk_budget: bool = False  # that budget is `chunk` (Sarathi-Serve's setting), else `max_batch_tokens`
    watermark: bool = True  # admission keeps WATERMARK of the blocks free (vLLM V0's block manager)
    engine_defaults: bool = False  # unset token budget and sequence limit take vLLM V1's per-GPU defaults
    iteration_level: bool = True  # schedules every iteration (else whole batches: calc.serve.static)


POLICIES = {
    "static": Policy(mixed=False, paged=False, chunked=False, iteration_level=False),
    "orca": Policy(mixed=True, paged=False, chunked=False),
    "vllm": Policy(mixed=False, paged=True, chunked=False),
    "sarathi": Policy(mixed=True, paged=True, chunked=True, chunk_budget=True),
    "vllm-v1": Policy(mixed=True, paged=True, chunked=True, watermark=False, engine_defaults=True),
}
ITERATION_LEVEL = ", ".join(name for name, p in POLICIES.items() if p.iteration_level)


@dataclass(frozen=True)
class EngineLimits:
    scheduler: str
    max_batch_tokens: int  # prompt tokens per iteration (non-chunked schedulers)
    max_seqs: int
    chunk: int  # the token budget per iteration of a policy whose chunk_budget is set (sarathi)
    block_size: int
    total_blocks: int
    preemption: str  # "recompute" or "swap"
    swap_s_per_block: float  # one KV block over the host link, one direction
    shared_prefix: int = 0  # prefix caching: tokens (whole blocks) of a prompt prefix every request shares


@dataclass
class Trace:
    """Per-request times (NaN-free: every request finishes) and per-iteration samples."""

    sched_s: list[float]
    first_s: list[float]
    finish_s: list[float]
    iter_end_s: list[float]
    iter_used_blocks: list[int]
    iter_batch_tokens: list[int]
    iter_in_system: list[int]  # requests arrived and not finished, after the iteration
    preempt_s: list[float]
    busy_s: float
    arrival_s: list[float] | None = None  # when each request was sent (a closed loop sets them); None: the workload's


class Engine:
    """One engine instance over sorted requests [(arrival_s, prompt, output)]."""

    # spec is a SpecDecode, typed Any: its expected tokens per step is a float, which would make the
    # engine's token and block counts floats; they are integers whenever blocks are paged (no spec)
    def __init__(self, requests: Requests, cost: IterationCost, limits: EngineLimits, spec: Any = None,
                 prefilled: bool = False, concurrency: int = 0, frontend_s: float = 0.0) -> None:
        """spec: a calc.serve.spec.SpecDecode (decode steps then emit its expected tokens each, and
        KV is reserved for prompt + output on admission). prefilled: requests arrive with their prompt's
        KV and first token (a disaggregated decode instance); a preempted one is prefilled again here.
        concurrency: clients of a closed loop (0: every request arrives at its own time). frontend_s: the API
        server's time per request, one request at a time (module docstring)."""
        self.req, self.cost, self.lim, self.spec = requests, cost, limits, spec
        self.client = [a for a, _, _ in requests]  # when each request was sent
        self.concurrency = concurrency
        if concurrency:
            for i in range(concurrency, len(requests)):
                self.client[i] = math.inf  # released when an earlier request finishes
        self.released = min(concurrency, len(requests)) if concurrency else len(requests)
        self.frontend_s, self.frontend_free = frontend_s, 0.0
        self.arrival = [math.inf] * len(requests)  # when each request reaches the scheduler
        for i in range(self.released):
            self._through_frontend(i)
        self.policy = POLICIES[limits.scheduler]
        self.E = spec.tokens_per_step if spec else 1  # tokens per decode step and sequence
        self.step_cost = spec.step_s if spec else cost.decode_s
        if spec:
            self.policy = replace(self.policy, paged=False)
        n, bs = len(requests), limits.block_size
        for _, p, o in requests:
            require(kv_blocks(p + o, bs) <= limits.total_blocks,
                    f"a request of {p} + {o} tokens needs {kv_blocks(p + o, bs)} KV blocks; the GPU holds "
                    f"{limits.total_blocks} (raise --gpu-memory-utilization, use --tp or a shorter workload)")
        self.L = [p for _, p, _ in requests]  # tokens to prefill (prompt, or prompt + generated after recompute)
        self.done = [0] * n  # of L, tokens prefilled so far (chunked prefill)
        self.cached = [prefilled] * n  # KV of the prompt arrives with the request
        self.gen = [1 if prefilled else 0] * n
        self.enter = [0] * n  # decode step counter when the sequence started decoding
        self.ver = [0] * n
        self.held = [0] * n  # blocks held (reserve mode; paged mode while prefilling)
        self.decoding = [False] * n
        self.sched_s, self.first_s, self.finish_s = [-1.0] * n, [-1.0] * n, [-1.0] * n
        self.free = limits.total_blocks
        # Prefix caching (vLLM's automatic prefix caching, whole blocks only): the shared prefix's blocks
        # are kept for good; the first request computes them, later ones start their prefill after them.
        self.shared = limits.shared_prefix // limits.block_size
        self.free -= self.shared
        self.prefix_ready = False
        self.g = 0  # decode steps run so far
        self.d = self.keys = 0  # decoding sequences, sum of their next step's keys
        self.phase = [0] * bs  # decoding sequences by (L - enter) mod block_size
        self.heap: list[tuple[int, int, int]] = []
        self.running: list[int] = []  # admission order (finished ones removed lazily)
        self.n_running = self.n_done = 0
        self.waiting: deque[int] = deque()
        self.swapped: deque[int] = deque()
        self.prefilling: list[int] = []
        self.now, self.next_arrival, self.busy = 0.0, 0, 0.0
        self.trace = Trace(self.sched_s, self.first_s, self.finish_s, [], [], [], [], [], 0.0, self.client)

    def _through_frontend(self, i: int) -> None:
        """Request i, sent at client[i], reaches the scheduler after the API server's turn at it."""
        if self.frontend_s:
            self.frontend_free = max(self.client[i], self.frontend_free) + self.frontend_s
            self.arrival[i] = self.frontend_free
        else:
            self.arrival[i] = self.client[i]

    # ----- decode set -------------------------------------------------------------------------
    def _kv(self, i: int) -> int:
        return self.L[i] + (self.g - self.enter[i]) * self.E

    def _start_decode(self, i: int) -> None:
        self.decoding[i], self.enter[i] = True, self.g
        self.d += 1
        self.keys += self.L[i] + 1
        if self.policy.paged:
            self.phase[(self.L[i] - self.g) % self.lim.block_size] += 1
            self.held[i] = 0
        heapq.heappush(self.heap, (self.g + math.ceil((self.req[i][2] - self.gen[i]) / self.E), i, self.ver[i]))

    def _stop_decode(self, i: int) -> int:
        """Remove i from the decode set; returns the blocks it held."""
        self.decoding[i] = False
        self.ver[i] += 1
        self.d -= 1
        self.keys -= self._kv(i) + 1
        if not self.policy.paged:
            return self.held[i]
        self.phase[(self.L[i] - self.enter[i]) % self.lim.block_size] -= 1
        return kv_blocks(self._kv(i), self.lim.block_size) - self.shared

    def _finish(self, i: int) -> None:
        self.free += self._stop_decode(i) if self.decoding[i] else self.held[i]
        self.held[i] = 0
        self.finish_s[i] = self.now
        self.n_running -= 1
        self.n_done += 1
        if self.released < len(self.req):  # a closed loop's client sends its next request
            self.client[self.released] = max(self.req[self.released][0], self.now)
            self._through_frontend(self.released)
            self.released += 1

    def _emit_first(self, i: int) -> None:
        """Prefill of i is complete: it samples a token and decodes or finishes."""
        self.gen[i] += 1
        if self.first_s[i] < 0:
            self.first_s[i] = self.now
        if self.gen[i] >= self.req[i][2]:
            self._finish(i)
        else:
            self._start_decode(i)  # paged: the decode set's accounting takes over the prompt's blocks

    # ----- admission and preemption -----------------------------------------------------------
    def _arrivals(self) -> None:
        while self.next_arrival < len(self.req) and self.arrival[self.next_arrival] <= self.now:
            self.waiting.append(self.next_arrival)
            self.next_arrival += 1

    def _blocks_for(self, i: int) -> int:
        """Blocks to admit i (the shared prefix's blocks are already held)."""
        if self.policy.paged:
            return kv_blocks(self.L[i], self.lim.block_size) - self.shared
        return kv_blocks(self.L[i] + self.req[i][2] - self.gen[i], self.lim.block_size) - self.shared

    def _admit(self, i: int) -> None:
        need = self._blocks_for(i)
        self.free -= need
        self.held[i] = need
        self.done[i] = self.lim.shared_prefix if self.prefix_ready and self.shared else 0
        if self.sched_s[i] < 0:
            self.sched_s[i] = self.now
        self.running.append(i)
        self.n_running += 1

    def _can_admit(self, i: int, tokens: int) -> bool:
        lim = self.lim
        if self.n_running >= lim.max_seqs:
            return False
        if not self.policy.chunked and not self.cached[i] and tokens and tokens + self.L[i] > lim.max_batch_tokens:
            return False
        reserve = int(WATERMARK * lim.total_blocks) if self.policy.paged and self.policy.watermark and self.n_running else 0
        return self._blocks_for(i) <= self.free - reserve

    def _preempt_last(self) -> float:
        """Preempt the latest admitted running sequence; returns the swap time it costs."""
        while True:
            v = self.running.pop()
            if self.finish_s[v] < 0 and (self.decoding[v] or v in self.prefilling):
                break
        self.trace.preempt_s.append(self.now)
        self.n_running -= 1
        if not self.decoding[v]:  # a partly prefilled prompt: drop its blocks, start again later
            self.prefilling.remove(v)
            self.free += self.held[v]
            self.held[v] = 0
            self.waiting.appendleft(v)
            return 0.0
        kv = self._kv(v)
        self.gen[v] += self.g - self.enter[v]  # tokens it decoded so far (paged, so one per step) are kept
        blocks = self._stop_decode(v)
        self.free += blocks
        if self.lim.preemption == "swap":
            self.L[v] = kv
            self.swapped.append(v)
            return blocks * self.lim.swap_s_per_block
        self.L[v] = self.req[v][1] + self.gen[v]
        self.waiting.appendleft(v)
        return 0.0

    def _grow_decodes(self) -> float:
        """Blocks for this decode step's new tokens, preempting until they fit; returns swap time."""
        if not self.policy.paged or not self.d:
            return 0.0
        swap_s = 0.0
        while True:
            need = self.phase[(-self.g) % self.lim.block_size]
            if need <= self.free:
                self.free -= need
                return swap_s
            swap_s += self._preempt_last()

    def _swap_in(self) -> float:
        swap_s = 0.0
        while self.swapped and self.n_running < self.lim.max_seqs:
            i = self.swapped[0]
            need = kv_blocks(self.L[i], self.lim.block_size) - self.shared
            if need > self.free - int(WATERMARK * self.lim.total_blocks):
                break
            self.swapped.popleft()
            self.free -= need
            self.running.append(i)
            self.n_running += 1
            self._start_decode(i)
            swap_s += need * self.lim.swap_s_per_block
        return swap_s

    # ----- iterations -------------------------------------------------------------------------
    def _take_prefills(self, budget: int) -> list[tuple[int, int, int]]:
        """(seq, chunk tokens, tokens already cached) of this iteration's prefill work."""
        chunks, tokens = [], 0
        for i in self.prefilling:
            c = min(self.L[i] - self.done[i], budget - tokens) if self.policy.chunked else self.L[i] - self.done[i]
            if c <= 0:
                break
            chunks.append((i, c, self.done[i]))
            tokens += c
        while self.waiting and not self.swapped and (not self.policy.chunked or tokens < budget):
            i = self.waiting[0]
            if not self._can_admit(i, tokens):
                break
            self.waiting.popleft()
            self._admit(i)
            if self.cached[i]:  # straight to decoding (gen is already 1)
                self.cached[i] = False
                self._start_decode(i)
                if self.policy.mixed and self.policy.paged and self.L[i] % self.lim.block_size == 0:
                    self.free -= 1  # this iteration's token opens a block (_grow_decodes already ran)
                continue
            self.prefilling.append(i)
            left = self.L[i] - self.done[i]
            c = min(left, budget - tokens) if self.policy.chunked else left
            chunks.append((i, c, self.done[i]))
            tokens += c
        return chunks

    def step(self) -> bool:
        """Run one iteration; False when there is nothing left to do."""
        self._arrivals()
        swap_s = self._swap_in() if self.policy.paged else 0.0
        if self.policy.mixed:  # decodes first, then prefill work in what is left of the budget
            swap_s += self._grow_decodes()
            if self.policy.chunked:
                budget = (self.lim.chunk if self.policy.chunk_budget else self.lim.max_batch_tokens) - self.d
            else:
                budget = self.lim.max_batch_tokens
            chunks = self._take_prefills(budget) if budget > 0 else []
            d = self.d
        else:  # prefill first: a decode step only when no prompt can be admitted
            chunks = self._take_prefills(self.lim.max_batch_tokens)
            d = 0
            if not chunks:
                swap_s += self._grow_decodes()
                d = self.d
        if not chunks and not d:
            if self.next_arrival < len(self.req) and self.arrival[self.next_arrival] < math.inf:
                self.now = max(self.now, self.arrival[self.next_arrival])
                return True
            require(not (self.waiting or self.swapped), "serve: no request can be scheduled (internal)")
            return False
        if not chunks:
            self._decode_run(swap_s)
            return True
        completing = [i for i, c, p in chunks if p + c >= self.L[i]]
        pf = sum(c for _, c, _ in chunks)
        pairs, pkeys = sum(c * p + c * c / 2 for _, c, p in chunks), sum(c + p for _, c, p in chunks)
        if self.spec:  # prefill chunks in their own pass, then one speculative step of the decodes
            dt = self.cost.mixed_s(pf, len(completing), pf, pairs, pkeys, 0, 0) + (self.spec.step_s(d, self.keys) if d else 0)
        else:
            dt = self.cost.mixed_s(pf + d, d + len(completing), pf, pairs, pkeys, d, self.keys)
        dt += swap_s
        self._advance(dt, pf + d)
        self.trace.iter_in_system.append(self.next_arrival - self.n_done)
        for i, c, _ in chunks:
            self.done[i] += c
        if d:
            self.g += 1
            self.keys += self.d * self.E
            self._pop_finished()
        self.prefix_ready = self.prefix_ready or any(self.done[i] >= self.lim.shared_prefix for i, _, _ in chunks)
        for i in completing:
            self.prefilling.remove(i)
            self._emit_first(i)
        return True

    def _advance(self, dt: float, tokens: int) -> None:
        self.now += dt
        self.busy += dt
        t = self.trace
        t.iter_end_s.append(self.now)
        t.iter_used_blocks.append(self.lim.total_blocks - self.free)
        t.iter_batch_tokens.append(tokens)

    def _decode_run(self, swap_s: float) -> None:
        """Decode-only iterations back to back until something can change the batch: a sequence
        finishes, a request arrives, or a step lacks KV blocks (then the next `step` preempts).
        The hot loop of the simulator: locals only."""
        heap, t, bs, paged, phase = self.heap, self.trace, self.lim.block_size, self.policy.paged, self.phase
        arrival = self.arrival[self.next_arrival] if self.next_arrival < len(self.req) else math.inf
        in_system, d, total = self.next_arrival - self.n_done, self.d, self.lim.total_blocks
        step_s, tokens_per_step = self.step_cost, self.E
        now, g, keys, free, busy = self.now, self.g, self.keys, self.free, self.busy
        ends, used, tokens, counts = t.iter_end_s, t.iter_used_blocks, t.iter_batch_tokens, t.iter_in_system
        first_finish = heap[0][0] if heap else None
        while True:
            dt = step_s(d, keys) + swap_s
            swap_s = 0.0
            now += dt
            busy += dt
            ends.append(now)
            used.append(total - free)
            tokens.append(d)
            counts.append(in_system)
            g += 1
            keys += d * tokens_per_step
            if g == first_finish or now >= arrival:
                break
            if paged:
                need = phase[(-g) % bs]
                if need > free:
                    break
                free -= need
        self.now, self.g, self.keys, self.free, self.busy = now, g, keys, free, busy
        self._pop_finished()

    def _pop_finished(self) -> None:
        while self.heap and self.heap[0][0] <= self.g:
            _, i, ver = heapq.heappop(self.heap)
            if ver == self.ver[i] and self.decoding[i]:
                self.gen[i] = self.req[i][2]
                self._finish(i)

    def run(self) -> Trace:
        if not self.policy.iteration_level:
            from .static import run_static

            return run_static(self)
        while self.step():
            pass
        self.trace.busy_s = self.busy
        return self.trace
