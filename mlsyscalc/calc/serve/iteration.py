"""Time of one serving iteration (a mixed batch of prefill chunks and decodes), from the roofline.

A batch is described by the few sums that every kernel's FLOPs and bytes are affine in:

    tokens          T   prefill-chunk tokens + decode tokens (linears, norms, MLP, KV write)
    samples         S   sequences that sample a token (final norm, lm_head, logits gather)
    prefill_tokens  sum of chunk lengths c                     (prefill attention: Q and O)
    prefill_pairs   sum of c p + c^2 / 2 over chunks            (causal scores; p = tokens already cached)
    prefill_keys    sum of p + c                                (prefill attention: K and V read)
    decodes         D   sequences decoding one token             (decode attention: Q and O)
    decode_keys     sum of context + 1 over decodes             (decode attention: K and V read)

`IterationCost` evaluates `calc.roofline.model.predict_model` at a handful of shapes, solves each
kernel row's FLOPs, bytes and memory time as affine functions of these sums (MoE rows also in the
expected number of distinct experts, `expected_distinct_experts`, which the roofline uses), and
then prices any batch as sum over rows of count x (max(compute, memory, floor) + launch). Compute time is
FLOPs x the row's seconds per FLOP at a large shape (the roofline's wave quantisation averaged out);
from M_TILE tokens up, a dense matmul row's FLOPs are counted over the tokens padded to whole M_TILE-row
tiles (the roofline's large-tile BLOCK_M), so a 577-token prefill computes like a 640-token one.
tests/test_serve_cost.py checks the result against predict_model on whole batches.
Tensor-parallel collectives come from calc.comm.tp_rows (per distinct T and S, cached).
Host time: every iteration pays `overhead_s` plus `overhead_per_seq_s` per sequence that samples a
token in it, on top of its kernels (the engine's scheduling, input building, sampling, detokenising).
With options.kv_layout "paged" (serving) attention runs on the paged kernels (calc.roofline.paged):
the rows are fitted on the contiguous kernel's FLOPs and bytes, prefill rows compute at
PAGED_PREFILL_RATIO of its rate, and a decode pass takes FlashAttention's split rule (at most
`max_decode_splits` splits: 1 for an engine that never splits the KV sequence), its CTAs' streaming
cap and the split's combine kernel at the batch's mean context (cached per batch size and KV blocks).
Sliding-window and chunked layers are priced as full causal attention (an upper bound for Mistral,
Gemma-2/3, gpt-oss and Llama 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...dtypes import bytes_per_element
from ...errors import MlsysError
from ...specs.model import ModelSpec, MoESpec
from ..roofline.calibration import Ceilings
from ..comm.tp_rows import tp_comm_rows
from ..roofline.model import ModelRoofline, expected_distinct_experts, predict_model
from ..roofline.ops import CTA_ROWS, MATMUL_TILES, UNALIGNED_TILE_ROWS
from ..roofline.paged import MAX_SPLITS, PAGED_PREFILL_RATIO, SPLIT_BLOCK_N, combine_s, decode_stream
from ..roofline.options import RooflineOptions

# Shapes the coefficients are solved at and checked at (small: exact arithmetic, any model's positions).
_FIT_TOKENS = (1, 2)
# expert rows: from 2 tokens on, where even top-1 routing reaches more than one expert (one token's
# single expert streams as a plain GEMM, a class of its own)
_GROUPED_FIT_TOKENS = (2, 3)
_CHECK_TOKENS = 7
_RATE_TOKENS = 8192  # seconds per FLOP of compute-bound rows are read at this many tokens
_PARTS = ("flops", "read_bytes", "write_bytes", "memory_s")
M_TILE = MATMUL_TILES[0][0]  # rows of the roofline's large GEMM tiles (128): tokens are padded to them


def padded_tokens(t: int) -> int:
    """Tokens a dense GEMM over t tokens computes: t below one tile (skinny shapes take small tiles),
    else t rounded up to whole M_TILE-row tiles."""
    return t if t < M_TILE else -(-t // M_TILE) * M_TILE


def _experts(moe: MoESpec | None, t: int) -> float:
    """Expected distinct experts over t tokens: the second feature of a grouped row, which only MoE layers have."""
    assert moe is not None, "a grouped (expert) row in a model without MoE"
    return expected_distinct_experts(moe.num_experts, moe.experts_per_token, t)



def kv_blocks(tokens: int, block_size: int) -> int:
    """KV-cache blocks that `tokens` positions occupy: ceil(tokens / block_size)."""
    return -(-tokens // block_size)


@dataclass(frozen=True)
class Batch:
    """The sums of one iteration that its roofline time depends on (see the module docstring)."""

    tokens: int = 0
    samples: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_keys: int = 0
    decodes: int = 0
    decode_keys: int = 0

    @staticmethod
    def of(chunks: tuple[tuple[int, int], ...] = (), contexts: tuple[int, ...] = (), samples: int | None = None) -> "Batch":
        """A batch from prefill chunks (c new tokens, p already cached) and decode contexts (tokens cached)."""
        c = sum(n for n, _ in chunks)
        return Batch(tokens=c + len(contexts), samples=len(contexts) + len(chunks) if samples is None else samples,
                     prefill_tokens=c, prefill_pairs=sum(n * p + n * n / 2 for n, p in chunks),
                     prefill_keys=sum(n + p for n, p in chunks), decodes=len(contexts),
                     decode_keys=sum(ctx + 1 for ctx in contexts))


@dataclass(frozen=True)
class AffineRow:
    """One kernel row: count x (max(spf x flops(x), memory_s(x), floor) + launch), each part affine in x."""

    name: str
    count: int
    coef: dict  # part -> tuple of coefficients over the row's features
    seconds_per_flop: float
    launch_s: float  # the kernel's fixed cost plus the stream's gap before it (OpPrediction.step_s less its busy time)
    grouped: bool = False  # MoE expert matmul: features (T, distinct experts) instead of (1, T)
    tiled: bool = False  # dense matmul over the batch's tokens: compute over padded_tokens(T)
    floor_s: float = 0.0  # a plain GEMM's shortest busy time (calc.roofline.ops)
    wide_scale: float = 1.0  # memory time x this from UNALIGNED_TILE_ROWS tokens (an unaligned GEMM's slower stream)
    tall_scale: float = 1.0  # and x this past CTA_ROWS tokens (a skinny GEMM's few-CTA cap no longer applies)
    small_memory_s: tuple[float, ...] = ()  # when set: the memory time at 1..CTA_ROWS tokens, read one by one

    def part(self, name: str, x: tuple[float, ...]) -> float:
        return sum(c * v for c, v in zip(self.coef[name], x))

    def time_s(self, x: tuple[float, ...], x_compute: tuple[float, ...] | None = None) -> float:
        """x_compute: the features the compute time is counted at (default x)."""
        compute = self.seconds_per_flop * self.part("flops", x if x_compute is None else x_compute)
        memory = self.part("memory_s", x)
        if self.small_memory_s and x[1] <= len(self.small_memory_s):
            memory = self.small_memory_s[int(x[1]) - 1]
        elif not self.grouped:
            memory *= (self.wide_scale if x[1] >= UNALIGNED_TILE_ROWS else 1.0) * (self.tall_scale if x[1] > CTA_ROWS else 1.0)
        return self.count * (max(compute, memory, self.floor_s) + self.launch_s)


def _step_scale(fitted: AffineRow, rows: list, steps: tuple[int, int], before: float) -> float | None:
    """The factor on a row's memory time that starts at steps[0] tokens (its roofline rows at steps[0]
    and steps[1] tokens; checked at the second); `before`: the factor already applying there. None when
    the check fails: the memory time steps again between the two (the caller reads it token by token)."""
    base = fitted.part("memory_s", (1.0, steps[0])) * before
    scale = rows[0].pred.memory_s / base if base > 0 else 1.0
    want = rows[1].pred.memory_s
    if abs(fitted.part("memory_s", (1.0, steps[1])) * before * scale - want) > 1e-6 * max(want, 1e-30):
        return None
    return scale


def _solve(rows: list[list[float]], values: list[float]) -> tuple[float, ...]:
    """Gauss-Jordan elimination for a small square system (features x coefficients = values)."""
    n = len(rows)
    m = [list(r) + [v] for r, v in zip(rows, values)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            raise MlsysError("serve: singular fit of the roofline coefficients (internal)")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    return tuple(m[i][n] / m[i][i] for i in range(n))


def _fit_rows(samples: list[tuple[tuple[float, ...], list]], check: tuple[tuple[float, ...], list],
              rate: list) -> list[AffineRow]:
    """Rows evaluated at len(features) feature points -> affine rows, each with its kernel's fixed
    cost; `check` must agree (else an internal error: the roofline stopped being affine in these sums)."""
    out = []
    for i, row in enumerate(samples[0][1]):
        coef = {p: _solve([list(x) for x, _ in samples], [getattr(rs[i].pred, p) for _, rs in samples]) for p in _PARTS}
        fast = AffineRow(row.pred.name, row.count, coef, 0.0, row.pred.overhead_s + row.pred.gap_s)
        for p in _PARTS:
            want, got = getattr(check[1][i].pred, p), fast.part(p, check[0])
            if abs(want - got) > 1e-6 * max(abs(want), 1e-30):
                raise MlsysError(f"serve: {row.pred.name} {p} is not affine in the batch sums (internal)")
        spf = rate[i].pred.compute_s / rate[i].pred.flops if rate[i].pred.flops else 0.0
        out.append(replace(fast, seconds_per_flop=spf, floor_s=row.pred.floor_s))
    return out


@dataclass
class IterationCost:
    """Roofline time of a serving iteration, fast (affine rows, cached per distinct T and S)."""

    spec: ModelSpec
    ceilings: Ceilings
    options: RooflineOptions  # dtype, kv_dtype, tp, cluster, kv_layout, all_reduce (phase/batch/seq are set per fit)
    overhead_s: float = 0.0  # host time per iteration, added to every batch's kernel time
    overhead_per_seq_s: float = 0.0  # and host time per sequence that samples a token in the iteration
    max_decode_splits: int = MAX_SPLITS  # the engine's cap on a paged decode pass's KV splits (1: never splits)
    _token: dict = field(default_factory=dict, repr=False)
    _sample: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.paged = self.options.kv_layout == "paged"
        # fitted on the contiguous kernels (affine in the sums); the paged kernels' terms are applied per batch
        self.options = replace(self.options, check_fit=False, window="full", kv_layout="contiguous")
        self.token_rows, self.sample_rows = self._fit_linear()
        ratio = PAGED_PREFILL_RATIO.get(self.ceilings.gpu.architecture, 1.0) if self.paged else 1.0
        self.prefill_rows = [replace(r, seconds_per_flop=r.seconds_per_flop / ratio)
                             for r in self._fit_attention("prefill", [(1, 1, 0), (1, 2, 0), (1, 1, 4)], (2, 3, 5))]
        self.decode_rows = self._fit_attention("decode", [(1, 1, 1), (1, 1, 5)], (3, 1, 9))
        self._decode_base: dict[int, float] = {}
        self._decode_terms = [(r.count, r.seconds_per_flop * r.coef["flops"][0], r.seconds_per_flop * r.coef["flops"][1],
                               *r.coef["memory_s"], r.coef["read_bytes"][0] + r.coef["write_bytes"][0],
                               r.coef["read_bytes"][1] + r.coef["write_bytes"][1], r.launch_s) for r in self.decode_rows]
        spec, tp = self.spec, self.options.tp
        self._kv_heads = 1 if spec.mla else max(1, spec.num_kv_heads // tp)
        self._rows_per_kv_head = spec.num_heads // tp // self._kv_heads
        self._paged_decode: dict[tuple[int, int], tuple[float, float]] = {}

    def _model(self, phase: str, batch: int, seq: int, context: int = 0) -> ModelRoofline:
        return predict_model(self.spec, self.ceilings,
                             replace(self.options, phase=phase, batch=batch, seq=seq, context=context))

    def _fit_linear(self) -> tuple[list[AffineRow], list[AffineRow]]:
        """Token rows (every non-attention kernel over T tokens) and sampled rows (final norm, lm_head)."""
        moe = self.spec.moe

        def features(t: int, grouped: bool) -> tuple[float, ...]:
            return (t, _experts(moe, t)) if grouped else (1.0, t)

        wide = (UNALIGNED_TILE_ROWS, 2 * UNALIGNED_TILE_ROWS + 1)
        tall = (CTA_ROWS + 1, 2 * CTA_ROWS + 1)
        runs = {t: self._model("prefill", 1, t).rows
                for t in (*_FIT_TOKENS, *_GROUPED_FIT_TOKENS, _CHECK_TOKENS, *wide, *tall, self._rate_tokens())}
        out: dict[str, list[AffineRow]] = {"token": [], "sample": []}
        for i, row in enumerate(runs[1]):
            if row.pred.kind == "attention":
                continue
            # an expert row's groups: distinct experts at two tokens (one token reaches top-k of them, 1 with top-1)
            at_two = runs[_GROUPED_FIT_TOKENS[0]][i].pred
            grouped = len(at_two.dims) > 1 and at_two.dims[1] != 1
            fit_tokens = _GROUPED_FIT_TOKENS if grouped else _FIT_TOKENS
            fitted = _fit_rows([(features(t, grouped), [runs[t][i]]) for t in fit_tokens],
                               (features(_CHECK_TOKENS, grouped), [runs[_CHECK_TOKENS][i]]),
                               [runs[self._rate_tokens()][i]])[0]
            if not grouped:  # bytes stay affine; the unaligned GEMMs' efficiency changes at UNALIGNED_TILE_ROWS,
                # the few-CTA cap ends past CTA_ROWS (calc.roofline.ops.few_cta_stream)
                fitted = self._steps(fitted, i, runs, wide, tall)
            sampled = row.group == "head" and row.pred.name != "embedding"
            out["sample" if sampled else "token"].append(
                replace(fitted, grouped=grouped, tiled=row.pred.kind == "matmul" and not grouped))
        return out["token"], out["sample"]

    def _steps(self, fitted: AffineRow, i: int, runs: dict, wide: tuple[int, int], tall: tuple[int, int]) -> AffineRow:
        """Row i's memory-time steps at UNALIGNED_TILE_ROWS and past CTA_ROWS tokens; where the time steps more
        often below CTA_ROWS (cuBLAS's split-K choice, hence the few-CTA cap, changes with the rows: gemma2-9b's
        k_proj at 9 and 17 tokens), it is read from the roofline at every token count up to CTA_ROWS."""
        wide_scale = _step_scale(fitted, [runs[t][i] for t in wide], wide, 1.0)
        tall_scale = None if wide_scale is None else _step_scale(fitted, [runs[t][i] for t in tall], tall, wide_scale)
        if wide_scale is not None and tall_scale is not None:
            return replace(fitted, wide_scale=wide_scale, tall_scale=tall_scale)
        small = tuple(rows[i].pred.memory_s for rows in self._small_runs())
        tall_scale = _step_scale(fitted, [runs[t][i] for t in tall], tall, 1.0)
        if tall_scale is None:
            raise MlsysError(f"serve: {fitted.name} memory_s is not affine from {tall[0]} tokens (internal)")
        return replace(fitted, small_memory_s=small, tall_scale=tall_scale)

    def _small_runs(self) -> list:
        """The roofline's rows at 1..CTA_ROWS tokens (computed once, for the rows `_steps` reads one by one)."""
        if not hasattr(self, "_small"):
            self._small = [self._model("prefill", 1, t).rows for t in range(1, CTA_ROWS + 1)]
        return self._small

    def _rate_tokens(self) -> int:
        """A large prefill (capped by a learned position table) for the compute-bound rate."""
        # the positions calc.counts.flops.check_positions allows (OPT's table has 2 rows beyond them)
        return min(_RATE_TOKENS, self.spec.max_position_embeddings or self.spec.learned_positions or _RATE_TOKENS)

    def _fit_attention(self, phase: str, shapes: list[tuple[int, int, int]], check: tuple[int, int, int]) -> list[AffineRow]:
        """Attention rows over (prefill_tokens, prefill_pairs, prefill_keys) or (decodes, decode_keys);
        shapes are (batch, seq, context) of predict_model runs."""
        def features(b: int, s: int, ctx: int) -> tuple[float, ...]:
            if phase == "decode":
                return (b, b * (ctx + 1))
            return (b * s, b * (s * ctx + s * s / 2), b * (s + ctx))

        def attn(b: int, s: int, ctx: int) -> list:
            return [r for r in self._model(phase, b, s, ctx).rows if r.pred.kind == "attention"]

        long = min(4096, self._rate_tokens() - 1)
        rate = attn(1, long, 0) if phase == "prefill" else attn(64, 1, long)
        return _fit_rows([(features(*s), attn(*s)) for s in shapes], (features(*check), attn(*check)),
                         rate)

    def _linear_s(self, rows: list[AffineRow], t: int) -> float:
        moe = self.spec.moe
        padded = (1.0, padded_tokens(t))
        total = 0.0
        for row in rows:
            if row.grouped:
                total += row.time_s((t, _experts(moe, t)))
            else:
                total += row.time_s((1.0, t), padded if row.tiled else None)
        return total

    def _comm_s(self, t: int, sampled: bool) -> float:
        if self.options.tp == 1:
            return 0.0
        rows = tp_comm_rows(self.spec, self.ceilings.gpu, replace(self.options, batch=1, seq=t, phase="prefill"),
                            bytes_per_element(self.options.activation_dtype))
        return sum(r.total_s for r in rows if (r.collective == "all-gather") == sampled)

    def token_s(self, t: int) -> float:
        """Every kernel and collective that runs once per token of the batch (T tokens)."""
        if t not in self._token:
            self._token[t] = self._linear_s(self.token_rows, t) + self._comm_s(t, False) if t else 0.0
        return self._token[t]

    def sample_s(self, s: int) -> float:
        """Final norm, lm_head and the logits gather over the S sequences that sample."""
        if s not in self._sample:
            self._sample[s] = self._linear_s(self.sample_rows, s) + self._comm_s(s, True) if s else 0.0
        return self._sample[s]

    def totals(self, b: Batch) -> dict[str, float]:
        """FLOPs and bytes of the whole iteration (every kernel, no collectives): what the roofline
        counts for the same kernels, for checking the affine fit."""
        moe = self.spec.moe
        groups = [(self.token_rows, b.tokens), (self.sample_rows, b.samples)]
        out = dict.fromkeys(("flops", "read_bytes", "write_bytes"), 0.0)
        x: tuple[float, ...]
        for rows, t in groups:
            for row in rows if t else ():
                x = ((t, _experts(moe, t)) if row.grouped
                     else (1.0, t))
                for key in out:
                    out[key] += row.count * row.part(key, x)
        for rows, x, on in ((self.prefill_rows, (b.prefill_tokens, b.prefill_pairs, b.prefill_keys), b.prefill_tokens),
                            (self.decode_rows, (b.decodes, b.decode_keys), b.decodes)):
            for row in rows if on else ():
                for key in out:
                    out[key] += row.count * row.part(key, x)
        return out

    def time_s(self, b: Batch) -> float:
        return self.mixed_s(b.tokens, b.samples, b.prefill_tokens, b.prefill_pairs, b.prefill_keys,
                            b.decodes, b.decode_keys)

    def mixed_s(self, tokens: int, samples: int, prefill_tokens: int, prefill_pairs: float, prefill_keys: float,
                decodes: int, decode_keys: float) -> float:
        """`time_s` of a Batch given as its sums (the simulator's hot path: no Batch object)."""
        total = self.overhead_s + self.overhead_per_seq_s * samples + self.token_s(tokens) + self.sample_s(samples)
        if prefill_tokens:
            x = (prefill_tokens, prefill_pairs, prefill_keys)
            total += sum(r.time_s(x) for r in self.prefill_rows)
        if decodes:
            total += self.decode_attention_s(decodes, decode_keys)
        return total

    def decode_s(self, decodes: int, decode_keys: float) -> float:
        """A decode-only iteration: D sequences, decode_keys keys in all."""
        base = self._decode_base.get(decodes)
        if base is None:
            base = self._decode_base[decodes] = (self.overhead_s + self.overhead_per_seq_s * decodes
                                                 + self.token_s(decodes) + self.sample_s(decodes))
        return base + self.decode_attention_s(decodes, decode_keys)

    def _paged_terms(self, d: int, keys: float) -> tuple[float, float]:
        """(seconds per byte of the CTAs' streaming cap, the combine kernel's cost) of a paged decode pass
        of d sequences at their mean context (cached per d and KV blocks)."""
        blocks = max(1, -(-int(keys / d) // SPLIT_BLOCK_N))
        key = (d, blocks)
        if key not in self._paged_decode:
            splits, cap_Bps = decode_stream(self.ceilings, d, self._kv_heads, self._rows_per_kv_head, blocks * SPLIT_BLOCK_N,
                                            self.max_decode_splits)
            self._paged_decode[key] = (1.0 / cap_Bps, combine_s(self.ceilings, splits))
        return self._paged_decode[key]

    def decode_attention_s(self, d: int, keys: float) -> float:
        total = 0.0
        per_byte, combine = self._paged_terms(d, keys) if self.paged else (0.0, 0.0)
        for count, cd, ck, md, mk, bd, bk, launch in self._decode_terms:
            compute, memory = cd * d + ck * keys, md * d + mk * keys
            memory = max(memory, per_byte * (bd * d + bk * keys))
            total += count * ((compute if compute > memory else memory) + launch + combine)
        return total
