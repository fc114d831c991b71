"""Speculative decoding (Leviathan, Kalman & Matias, ICML 2023): a draft model proposes k tokens,
the target verifies them in one (k+1)-token pass, and accepts a prefix.

With a per-token acceptance rate a (i.i.d., their section 3.3), the expected tokens produced per
verification step are (1 - a^(k+1)) / (1 - a) (k + 1 when a = 1; their equation 1). One step of D
sequences costs k draft decode steps (keys growing by one per step) plus one target pass over
D (k+1) tokens whose attention is a (k+1)-token chunk at each sequence's context; both from the
roofline (calc.serve.iteration). It pays when expected tokens x plain step time > speculative step time.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import require
from .iteration import IterationCost
from .limits import MAX_SPEC_K


def expected_tokens(accept: float, k: int) -> float:
    """Leviathan et al. 2023, equation 1: E[tokens per step] = (1 - a^(k+1)) / (1 - a)."""
    require(0 <= accept <= 1, f"--accept must be in [0, 1], got {accept}")
    require(k >= 1, f"--spec-k must be >= 1, got {k}")
    require(k <= MAX_SPEC_K, f"--spec-k: {k:,} draft tokens a step; at most {MAX_SPEC_K}")
    return k + 1.0 if accept == 1 else (1 - accept ** (k + 1)) / (1 - accept)


@dataclass
class SpecDecode:
    target: IterationCost
    draft: IterationCost
    k: int
    accept: float

    def __post_init__(self) -> None:
        self.tokens_per_step = expected_tokens(self.accept, self.k)

    def draft_s(self, d: int, keys: float) -> float:
        return sum(self.draft.decode_s(d, keys + d * i) for i in range(self.k))

    def verify_s(self, d: int, keys: float) -> float:
        """The target's pass over k+1 tokens per sequence; keys = sum of (context + 1)."""
        c, ctx = self.k + 1, keys - d
        tokens = d * c
        return self.target.mixed_s(tokens, tokens, tokens, c * ctx + d * c * c / 2, ctx + tokens, 0, 0)

    def step_s(self, d: int, keys: float) -> float:
        """One speculative decode step of d sequences."""
        return self.draft_s(d, keys) + self.verify_s(d, keys)

    def verdict(self, d: int, context: int) -> dict[str, float | bool]:
        """Time per output token with and without speculation at batch d and one context."""
        keys = d * (context + 1)
        plain = self.target.decode_s(d, keys)
        spec = self.step_s(d, keys)
        speedup = self.tokens_per_step * plain / spec
        return {"batch": d, "context": context, "plain_step_s": plain, "spec_step_s": spec,
                "draft_s": self.draft_s(d, keys), "verify_s": self.verify_s(d, keys),
                "expected_tokens_per_step": self.tokens_per_step, "tpot_plain_s": plain,
                "tpot_spec_s": spec / self.tokens_per_step, "speedup": speedup, "pays": speedup > 1}
