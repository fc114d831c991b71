"""Which decoder layers each pipeline stage and model chunk holds: an even split, or an uneven one as Megatron-LM
builds it.

Megatron-LM (github.com/NVIDIA/Megatron-LM, commit d98e8a6: megatron/core/transformer/transformer_config.py,
`TransformerConfig.__post_init__` "Uneven PP"; transformer_block.py `get_num_layers_to_build`; transformer_layer.py
`get_transformer_layer_offset`) offers two uneven splits besides the even one, never both at once:

  even            every stage holds layers / pp decoder layers (layers % (pp x vp) == 0).
  first / last    --decoder-first-pipeline-num-layers F, --decoder-last-pipeline-num-layers L (each > 0, either or
                  both): the first (last) stage holds F (L) layers and the rest split evenly over the stages between;
                  a middle stage needs layers and leftover layers need a middle stage. With vp model chunks F, L and
                  a middle stage's layers must each divide by vp.
  account for     --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split: the embedding
                  (the loss) counts as one layer of the split, so every stage holds (layers + e + l) / pp slots and
                  the first (last) stage one decoder layer fewer, in its first (last) model chunk with vp
                  (slots / pp divisible by vp). Llama 3 405B (126 layers, 16 stages) and BLOOM 176B (70 layers,
                  12 stages) split this way.

With vp chunks a stage's slots split evenly over its chunks, and Megatron orders the layers chunk by chunk: round r
of vp rounds gives stage 0's chunk r, then stage 1's, ..., stage pp - 1's (vp = 1: contiguous blocks). A stage must
hold at least one decoder layer; a chunk may hold none (the embedding alone, as Llama 3's first chunk does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import require

HINT = ("for uneven stages give --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers or "
        "--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (Megatron-LM's options)")
FIRST, LAST = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"


@dataclass(frozen=True)
class PipelineSplit:
    """Megatron-LM's uneven pipeline options; all unset is the even split."""

    first: int | None = None  # --decoder-first-pipeline-num-layers
    last: int | None = None  # --decoder-last-pipeline-num-layers
    embedding: bool = False  # --account-for-embedding-in-pipeline-split
    loss: bool = False  # --account-for-loss-in-pipeline-split

    @property
    def even(self) -> bool:
        return self.first is None and self.last is None and not (self.embedding or self.loss)

    def as_dict(self) -> dict[str, int | bool | None]:
        return {"decoder_first_pipeline_num_layers": self.first, "decoder_last_pipeline_num_layers": self.last,
                "account_for_embedding_in_pipeline_split": self.embedding,
                "account_for_loss_in_pipeline_split": self.loss}


EVEN = PipelineSplit()
SPLIT_NAMES = (("decoder_first_pipeline_num_layers", "first {}"), ("decoder_last_pipeline_num_layers", "last {}"),
               ("account_for_embedding_in_pipeline_split", "emb"), ("account_for_loss_in_pipeline_split", "loss"))


def split_text(layout: Mapping[str, Any]) -> str:
    """The split options a layout (`PipelineSplit.as_dict` keys among others) sets, short: 'first 21+loss'; '' if even."""
    return "+".join(name.format(layout[key]) for key, name in SPLIT_NAMES if layout.get(key) not in (None, False))


def _ends(num_layers: int, pp: int, vp: int, split: PipelineSplit) -> list[int]:
    """Decoder layers per stage under --decoder-first/last-pipeline-num-layers."""
    given = [(FIRST, split.first), (LAST, split.last)]
    for flag, n in given:
        require(n is None or (isinstance(n, int) and n >= 1), f"{flag} must be a positive integer, got {n}")
        require(n is None or n % vp == 0, f"{flag} {n} must divide by --vp {vp} (each model chunk holds the same "
                                          "number of layers)")
    middle = pp - sum(n is not None for _, n in given)
    left = num_layers - (split.first or 0) - (split.last or 0)
    require(left >= 0, f"{FIRST} + {LAST} = {num_layers - left} layers, more than the model's {num_layers}")
    require(middle > 0 or left == 0, f"the first and last stages hold {num_layers - left} layers but the model has "
                                     f"{num_layers} and --pp {pp} leaves no middle stage for the rest")
    require(middle == 0 or left >= middle, f"{left} layers left for {middle} middle stages: each stage needs at least "
                                           "one layer")
    per = left // middle if middle else 0
    require(middle == 0 or left % middle == 0, f"the {left} layers left after the first/last stages do not split "
                                               f"evenly over the {middle} middle stages")
    require(middle == 0 or per % vp == 0, f"{per} layers on each middle stage must divide by --vp {vp}")
    stages = [per] * pp
    if split.first is not None:
        stages[0] = split.first
    if split.last is not None:
        stages[-1] = split.last
    return stages


def chunk_layers(num_layers: int, pp: int, vp: int = 1, split: PipelineSplit = EVEN,
                 even_rule: str = "rule layers % (pp*vp) == 0: layers over pp*vp model chunks") -> tuple[tuple[int, ...], ...]:
    """Decoder layers of each stage's model chunks, [stage][chunk] (module docstring); a split Megatron-LM refuses is
    an MlsysError naming the option. `even_rule` names the even split's rule in the caller's words."""
    if split.even:
        require(num_layers % (pp * vp) == 0, f"{even_rule}: {num_layers} is not divisible by {pp * vp}; {HINT}")
        return tuple((num_layers // (pp * vp),) * vp for _ in range(pp))
    require(pp > 1, "the uneven pipeline options split a pipeline: they need --pp > 1")
    if split.first is not None or split.last is not None:
        require(not (split.embedding or split.loss), f"{FIRST} / {LAST} or --account-for-embedding/loss-in-pipeline-"
                                                     "split, not both (Megatron-LM refuses the pair)")
        return tuple((n // vp,) * vp for n in _ends(num_layers, pp, vp, split))
    slots = num_layers + split.embedding + split.loss
    require(slots % pp == 0, f"{num_layers} layers + embedding/loss ({slots - num_layers}) = {slots} slots do not split "
                             f"evenly over --pp {pp} (--account-for-embedding/loss-in-pipeline-split)")
    require((slots // pp) % vp == 0, f"{slots // pp} slots per stage must divide by --vp {vp}")
    per = slots // (pp * vp)
    chunks = [[per] * vp for _ in range(pp)]
    chunks[0][0] -= split.embedding
    chunks[-1][-1] -= split.loss
    require(all(sum(c) >= 1 for c in chunks), f"{slots // pp} slots per stage leave the first or last stage without a "
                                               "decoder layer")
    return tuple(tuple(c) for c in chunks)


def stage_layer_ids(num_layers: int, pp: int, vp: int = 1, split: PipelineSplit = EVEN) -> tuple[tuple[int, ...], ...]:
    """The decoder layers each stage holds, all its chunks, in Megatron-LM's interleaved order (vp = 1: contiguous)."""
    counts = chunk_layers(num_layers, pp, vp, split)
    ids: list[list[int]] = [[] for _ in range(pp)]
    start = 0
    for r in range(vp):
        for s in range(pp):
            ids[s].extend(range(start, start + counts[s][r]))
            start += counts[s][r]
    return tuple(tuple(i) for i in ids)
