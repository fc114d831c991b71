"""A training step replayed from a CUDA graph (`mlsys bench model --phase train --mode graph`) does what the eager
step does. The graphed step runs 3 warm-up steps eagerly before its capture (a capture records, it does not run),
so from the same weights and tokens, 3 warm-ups and 2 replays must leave every parameter where 5 eager steps
leave it (forward, backward, fused AdamW, zeroed gradients), and the replays must move the weights.
GPU only: a CPU has no CUDA graphs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mlsyscalc.bench.cases.model import ModelCase, step_fn  # noqa: E402
from mlsyscalc.bench.torch_models import build_model  # noqa: E402
from mlsyscalc.specs.lookup import load_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")

SMALL = {"llama3-8b": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                       "intermediate_size": 512, "vocab_size": 512, "max_position_embeddings": 256},
         "gpt2": {"n_embd": 256, "n_layer": 2, "n_head": 4, "vocab_size": 512, "n_positions": 256}}


def _weights(model) -> list:
    return [p.detach().float().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_three_warm_ups_and_two_replays_equal_five_eager_steps(name):
    spec = load_model(name, SMALL[name])
    final = {}
    for graphs in (False, True):
        torch.manual_seed(1)
        model = build_model(spec, "bfloat16", "cuda")
        step = step_fn(model, spec, ModelCase("train", 2, 128, graphs=graphs), "cuda")
        if graphs:
            captured = _weights(model)  # after the 3 warm-up steps
            step()
            step()
            torch.cuda.synchronize()
            moved = sum(int((a != b).sum()) for a, b in zip(_weights(model), captured))
            assert moved > 0, "the replays did not change any weight"
        else:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        final[graphs] = _weights(model)
    for eager, replayed in zip(final[False], final[True]):
        # bf16 weights: at most 2 units in the last place apart (capturable AdamW keeps its step on the GPU)
        assert torch.allclose(eager, replayed, rtol=1.6e-2, atol=1e-5)
