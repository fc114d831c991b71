"""Replay a request trace through a small continuous-batching loop on a GPU and compare the measured
TTFT/TPOT with `mlsys serve`'s simulation of the same trace.

    python scripts/validate/serve_replay.py --model llama3-8b --out OUT_DIR [--rate 4 --requests 200 ...]

The loop exists to check the simulator, not to serve: a plain-torch decoder from
`mlsyscalc.bench.torch_models.build_model` (random weights, greedy tokens, outputs run to their
trace length), a paged KV cache (one fixed run of blocks per slot) read by our Triton decode kernel
(`kernels.attention_decode.decode_attention`), and the simulator's `vllm` policy: when a waiting
request has arrived and a slot is free, one iteration prefills it (prompts are drawn so that two
never fit the token budget); otherwise one decode step of every running sequence. Every iteration
ends with a device synchronise, so times are what a client would see.

Writes OUT_DIR/replay.json (per request: arrival, first token, finish; per run: the simulator's
numbers beside the measured ones; per iteration its kind, size, wall time and GPU time, whose
difference is the loop's host overhead; isolated step times against the fast roofline path);
scripts/validate/serve_replay_report.py turns it into reports/serving/replay.md. Without a GPU it runs on the CPU in fp32 (the test does this on a tiny model).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import deque

import torch

from mlsyscalc.bench._torch_layers import apply_rope
from mlsyscalc.bench.torch_models import build_model
from mlsyscalc.calc.serve.workload import from_trace, parse_length, synthetic

PAGE = 16


class PagedRunner:
    """A Decoder plus a paged KV cache of `slots` sequences of up to `max_len` tokens.

    K and V of all layers live in one tensor each, (layers, slots x max_len, KV, D); layer i's pages
    are its (blocks, PAGE, KV, D) view and slot s owns rows [s max_len, (s + 1) max_len). A prefill
    runs into a staging cache and one copy moves it into the slot, so that the forward itself does not
    depend on the slot (and can be a CUDA graph)."""

    def __init__(self, model, slots: int, max_len: int, max_prompt: int | None = None):
        from mlsyscalc.kernels.attention_decode import decode_attention

        spec = model.spec
        self.model, self.spec, self.attend = model, spec, decode_attention
        p = next(model.parameters())
        self.max_len = -(-max_len // PAGE) * PAGE
        kv = (spec.num_layers, slots * self.max_len, spec.num_kv_heads, spec.head_dim)
        self.k = torch.zeros(kv, dtype=p.dtype, device=p.device)
        self.v = torch.zeros(kv, dtype=p.dtype, device=p.device)
        stage = (spec.num_layers, 1, max_prompt or self.max_len, spec.num_kv_heads, spec.head_dim)
        self.stage_k = torch.zeros(stage, dtype=p.dtype, device=p.device)
        self.stage_v = torch.zeros(stage, dtype=p.dtype, device=p.device)
        self.table = torch.arange(slots * self.max_len // PAGE, dtype=torch.int32, device=p.device).view(slots, -1)
        cos, sin = model.rope(0, self.max_len, p)  # the model's own tables (its rope_theta), (S, 1, D)
        self.cos, self.sin = cos[:, 0], sin[:, 0]
        self.graphs: dict = {}  # ("prefill", P) or ("decode", B) -> (graph, static inputs, output)

    def _pages(self, cache, i: int):
        return cache[i].view(-1, PAGE, *cache.shape[2:])

    @torch.no_grad()
    def _prefill_stage(self, ids):
        caches = [(self.stage_k[i], self.stage_v[i]) for i in range(self.spec.num_layers)]
        return self.model.prefill(ids, caches).argmax(-1)

    @torch.no_grad()
    def prefill(self, slot: int, ids):
        """ids (1, P): fill the slot's cache, return the next token (greedy)."""
        n = ids.shape[1]
        graph = self.graphs.get(("prefill", n))
        if graph is None:
            token = self._prefill_stage(ids)
        else:
            graph[1].copy_(ids)
            graph[0].replay()
            token = graph[2]
        rows = slice(slot * self.max_len, slot * self.max_len + n)
        self.k[:, rows] = self.stage_k[:, 0, :n]
        self.v[:, rows] = self.stage_v[:, 0, :n]
        return token.clone()

    @torch.no_grad()
    def decode(self, slots, tokens, positions):
        """One token per sequence: tokens (B,), positions (B,) = tokens already cached. Returns logits (B, V)."""
        graph = self.graphs.get(("decode", tokens.shape[0]))
        if graph is None:
            return self._decode(slots, tokens, positions)
        for static, value in zip(graph[1], (slots, tokens, positions)):
            static.copy_(value)
        graph[0].replay()
        return graph[2]

    def _decode(self, slots, tokens, positions):
        m, spec = self.model, self.spec
        b = tokens.shape[0]
        x = m.embed(tokens[:, None])  # (B, 1, h)
        cos, sin = self.cos[positions][:, None, None, :], self.sin[positions][:, None, None, :]  # (B, 1, 1, D)
        flat = slots * self.max_len + positions  # row of each new token in a layer's (slots x max_len) rows
        lens = (positions + 1).to(torch.int32)
        table = self.table[slots]
        for i, layer in enumerate(m.layers):
            a = layer.attn
            h = layer.input_norm(x)
            q = a.q_proj(h).view(b, 1, spec.num_heads, spec.head_dim)
            k = a.k_proj(h).view(b, 1, spec.num_kv_heads, spec.head_dim)
            v = a.v_proj(h).view(b, 1, spec.num_kv_heads, spec.head_dim)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            self.k[i][flat] = k[:, 0]
            self.v[i][flat] = v[:, 0]
            o = self.attend(q.transpose(1, 2).contiguous(), self._pages(self.k, i), self._pages(self.v, i),
                            cache_seqlens=lens, block_table=table)
            x = x + a.o_proj(o.transpose(1, 2).reshape(b, 1, spec.num_heads * spec.head_dim))
            x = x + layer.mlp(layer.post_norm(x))
        return m.lm_head(m.norm(x)[:, -1]).float()

    @torch.no_grad()
    def capture(self, prefill_lengths, max_batch: int) -> None:
        """CUDA graphs of the prefill at each length and the decode at each batch size (as serving
        engines run decode; eager PyTorch launches would make the host, not the GPU, the bottleneck)."""
        dev = self.table.device
        pool = torch.cuda.graph_pool_handle()
        for n in sorted(set(prefill_lengths)):
            ids = torch.zeros((1, n), dtype=torch.long, device=dev)
            graph, _, out = self._graph(lambda ids=ids: self._prefill_stage(ids), (ids,), pool)
            self.graphs[("prefill", n)] = (graph, ids, out)
        for b in range(1, max_batch + 1):
            args = (torch.arange(b, device=dev), torch.zeros(b, dtype=torch.long, device=dev),
                    torch.full((b,), 16, device=dev))
            self.graphs[("decode", b)] = self._graph(lambda args=args: self._decode(*args), args, pool)

    @staticmethod
    def _graph(fn, inputs, pool):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = fn()
        return graph, inputs, out


def spec_layers(spec):
    return range(spec.num_layers)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class IterationClock:
    """Per iteration: wall time from the loop's top to the end of its bookkeeping, and the GPU time
    between CUDA events around the forward (None on the CPU); wall - GPU is the host overhead."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.rows: list[tuple[str, int, float, float | None]] = []  # kind, size, wall_s, gpu_s

    def begin(self) -> None:
        self.top = time.perf_counter()
        if self.cuda:
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def launch(self) -> None:
        if self.cuda:
            self.events[0].record()

    def landed(self) -> None:
        if self.cuda:
            self.events[1].record()

    def end(self, kind: str, size: int) -> None:
        gpu = self.events[0].elapsed_time(self.events[1]) * 1e-3 if self.cuda else None
        self.rows.append((kind, size, time.perf_counter() - self.top, gpu))


def replay(runner: PagedRunner, requests, max_seqs: int, max_batch_tokens: int) -> dict:
    """The simulator's vllm policy on the device; returns per-request times (s from the start) and
    per-iteration clock rows (IterationClock)."""
    dev = runner.table.device
    n = len(requests)
    first, finish, sched = [0.0] * n, [0.0] * n, [0.0] * n
    waiting, free = deque(), list(range(max_seqs))[::-1]
    running: dict[int, list] = {}  # request -> [slot, next token, position, generated]
    nxt, done, iters = 0, 0, 0
    gen = torch.Generator(device="cpu").manual_seed(0)
    clock = IterationClock(dev)
    start = time.perf_counter()
    while done < n:
        clock.begin()
        now = time.perf_counter() - start
        while nxt < n and requests[nxt][0] <= now:
            waiting.append(nxt)
            nxt += 1
        if waiting and free and requests[waiting[0]][1] <= max_batch_tokens:
            i = waiting.popleft()
            slot = free.pop()
            sched[i] = now
            ids = torch.randint(0, runner.spec.vocab_size, (1, requests[i][1]), generator=gen).to(dev)
            clock.launch()
            token = runner.prefill(slot, ids)
            clock.landed()
            _sync(dev)
            first[i] = time.perf_counter() - start
            running[i] = [slot, token, requests[i][1], 1]
            kind, size = "prefill", requests[i][1]
        elif running:
            order = list(running)
            slots = torch.tensor([running[i][0] for i in order], device=dev)
            tokens = torch.cat([running[i][1].view(1) for i in order])
            pos = torch.tensor([running[i][2] for i in order], device=dev)
            clock.launch()
            out = runner.decode(slots, tokens, pos).argmax(-1)
            clock.landed()
            _sync(dev)
            kind, size = "decode", len(order)
            t = time.perf_counter() - start
            for k, i in enumerate(order):
                state = running[i]
                state[1], state[2], state[3] = out[k], state[2] + 1, state[3] + 1
        else:
            time.sleep(max(0.0, min(0.01, requests[nxt][0] - now)))
            continue
        iters += 1
        for i in [i for i, s in running.items() if s[3] >= requests[i][2]]:
            finish[i] = first[i] if requests[i][2] == 1 else t
            free.append(running.pop(i)[0])
            done += 1
        clock.end(kind, size)
    return {"sched_s": sched, "first_s": first, "finish_s": finish, "iterations": iters, "clock": clock.rows}


def host_overhead(rows) -> dict:
    """Median host time per iteration (wall - GPU), all iterations and by kind; None without GPU times."""
    def median(xs):
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2 if xs else None

    out = {}
    for kind in ("all", "prefill", "decode"):
        xs = [w - g for k, _, w, g in rows if g is not None and kind in ("all", k)]
        out[f"{kind}_s"] = median(xs)
    return out


def measured_summary(requests, times) -> dict:
    from mlsyscalc.calc.serve.engine import Trace
    from mlsyscalc.calc.serve.metrics import Slo, summary

    trace = Trace(times["sched_s"], times["first_s"], times["finish_s"], [], [], [], [], [], 0.0)
    return summary(requests, trace, 1, Slo())


def step_times(runner: PagedRunner, cost, shapes, repeats: int = 5) -> list[dict]:
    """Isolated iterations against calc.serve.iteration: decode (batch, context) and prefill (tokens)."""
    from mlsyscalc.calc.serve.iteration import Batch

    dev, rows = runner.table.device, []
    clock = IterationClock(dev)
    for kind, size, ctx in shapes:
        clock.rows.clear()
        for _ in range(repeats + 1):
            _sync(dev)
            clock.begin()
            clock.launch()
            if kind == "prefill":
                runner.prefill(0, torch.zeros((1, size), dtype=torch.long, device=dev))
            else:
                runner.decode(torch.arange(size, device=dev), torch.zeros(size, dtype=torch.long, device=dev),
                              torch.full((size,), ctx, device=dev))
            clock.landed()
            _sync(dev)
            clock.end(kind, size)
        wall = sorted(r[2] for r in clock.rows[1:])
        gpu = sorted(r[3] for r in clock.rows[1:]) if clock.cuda else None
        batch = Batch.of(chunks=((size, 0),), samples=1) if kind == "prefill" else Batch.of(contexts=(ctx,) * size)
        rows.append({"kind": kind, "size": size, "context": ctx, "measured_s": wall[len(wall) // 2],
                     "gpu_s": gpu[len(gpu) // 2] if gpu else None, "predicted_s": cost.time_s(batch)})
    return rows


def simulated(spec, gpu_name, requests, max_seqs, max_batch_tokens, dtype) -> tuple[dict, object]:
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
    from mlsyscalc.calc.serve.iteration import IterationCost

    ceil = resolve_ceilings(gpu_name)
    opts = ServeOptions(scheduler="vllm", max_seqs=max_seqs, max_batch_tokens=max_batch_tokens,
                        kv_blocks=10**7, dtype=dtype)
    cost = IterationCost(spec, ceil, opts.roofline)
    return simulate(spec, ceil, from_trace(list(requests), "replay"), opts, cost).metrics, cost


KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "e2e_p50_s",
        "e2e_p99_s", "throughput_requests_per_s", "throughput_tokens_per_s")


def run(args, save=lambda out: None) -> dict:
    """Isolated iterations first, then one replay per rate; `save(out)` after each (a time limit loses
    only the run in progress)."""
    from mlsyscalc.specs.lookup import load_model, parse_overrides

    spec = load_model(args.model, parse_overrides(tuple(args.set)) or None)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = "bfloat16" if cuda else "float32"
    torch.manual_seed(0)
    model = build_model(spec, dtype, device).eval()
    prompt, output = parse_length(args.prompt_len, "--prompt-len"), parse_length(args.output_len, "--output-len")
    max_prompt = _round(int(prompt.params[-1]) if prompt.kind != "fixed" else int(prompt.params[0]), args.prompt_round)
    runner = PagedRunner(model, args.max_seqs, max_prompt + int(output.params[-1]) + 1, max_prompt)
    gpu = args.gpu or (_gpu_name(device) if cuda else "H100-SXM")
    out = {"model": spec.name, "device": torch.cuda.get_device_name(device) if cuda else "cpu", "gpu_spec": gpu,
           "torch": torch.__version__, "dtype": dtype, "commit": os.environ.get("MLSYS_GIT_COMMIT", "unknown"),
           "runs": []}
    for b in range(1, args.max_seqs + 1):  # compile and autotune the decode kernel for every batch first
        runner.decode(torch.arange(b, device=device), torch.zeros(b, dtype=torch.long, device=device),
                      torch.full((b,), 16, device=device))
    traces = {rate: [(a, _round(p, args.prompt_round), o) for a, p, o in
                     synthetic(prompt, output, rate, args.requests, args.seed).requests] for rate in args.rate}
    out["cuda_graphs"] = False
    if cuda and not args.eager:
        lengths = {p for reqs in traces.values() for _, p, _ in reqs} | set(args.prefill_sizes)
        try:
            runner.capture(lengths, args.max_seqs)
            out["cuda_graphs"] = True
        except Exception as exc:  # noqa: BLE001 - record it and replay eagerly rather than lose the run
            runner.graphs.clear()
            out["cuda_graphs_error"] = f"{type(exc).__name__}: {exc}"
    shapes = [("prefill", n, 0) for n in args.prefill_sizes] + [("decode", b, c) for b, c in args.decode_sizes]
    runner.prefill(0, torch.zeros((1, 8), dtype=torch.long, device=device))  # warm-up (kernel compiles)
    out["steps"] = step_times(runner, simulated(spec, gpu, [(0.0, 8, 1)], args.max_seqs, 8, "bf16" if cuda else "fp32")[1],
                              shapes)
    save(out)
    for rate in args.rate:
        reqs = traces[rate]
        runner.prefill(0, torch.zeros((1, 8), dtype=torch.long, device=device))  # warm-up (kernel compiles)
        times = replay(runner, reqs, args.max_seqs, max_prompt)
        # one prompt per prefill iteration, as the loop runs: a budget of the shortest prompt admits one at a time
        sim, _ = simulated(spec, gpu, reqs, args.max_seqs, min(p for _, p, _ in reqs), "bf16" if cuda else "fp32")
        meas = measured_summary(reqs, times)
        out["runs"].append({"rate": rate, "requests": reqs, "times": times, "host_overhead": host_overhead(times["clock"]),
                            "measured": {k: meas[k] for k in KEYS}, "simulated": {k: sim[k] for k in KEYS}})
        save(out)
    return out


def _round(n: int, step: int) -> int:
    """Prompt lengths rounded up to a multiple of `step` (few distinct prefill shapes to capture)."""
    return -(-n // step) * step if step > 1 else n


def _gpu_name(device) -> str:
    from mlsyscalc.calc.roofline.calibration import match_gpu

    return match_gpu(torch.cuda.get_device_name(device)).name


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3-8b")
    p.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (tiny test models)")
    p.add_argument("--gpu", default=None, help="GPU spec for the simulator (default: matched from the device)")
    p.add_argument("--rate", type=float, action="append", default=None)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt-len", default="uniform:512,1000")
    p.add_argument("--output-len", default="uniform:64,256")
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--prompt-round", type=int, default=64, help="round prompt lengths up to a multiple (graphs)")
    p.add_argument("--eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--prefill-sizes", type=int, nargs="*", default=[128, 512, 1000])
    p.add_argument("--decode-sizes", type=lambda s: tuple(int(x) for x in s.split("x")), nargs="*",
                   default=[(1, 512), (16, 700), (64, 700)], help="BATCHxCONTEXT")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    args.rate = args.rate or [2.0, 20.0]
    return args


def main(argv=None) -> None:
    args = parse_args(argv)

    def save(out: dict) -> None:
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "replay.json"), "w") as fh:
                json.dump(out, fh)
        for r in out["runs"][-1:]:
            print(f"rate {r['rate']:g}: " + ", ".join(f"{k} measured {r['measured'][k]:.4g} simulated {r['simulated'][k]:.4g}"
                                                   for k in ("ttft_p50_s", "tpot_p50_s", "throughput_tokens_per_s")), flush=True)

    run(args, save)


if __name__ == "__main__":
    main()
