"""Value tests for the survivors of the check sample (docs/mutation.md, seed 7919), written after
that sample was scored. Expected numbers are hand arithmetic from the model's config.json
(model_specs/) written out here, never the code under test.
"""

from __future__ import annotations

import pytest

# llama2-7b: 32 layers of q, k, v, o (4096 x 4096) and gate, up, down (4096 x 11008)
LLAMA2_PROJ = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)


@pytest.mark.parametrize("model,weights,tensors", [
    ("llama2-7b", LLAMA2_PROJ, 32 * 7),
    # mixtral-8x7b: per layer q, o 4096^2; k, v 4096 x 1024; 8 experts x 3 of 4096 x 14336; the
    # router 4096 x 8; one scale per tensor and per expert copy: 4 + 24 + 1 = 29 a layer
    ("mixtral-8x7b", 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 24 * 4096 * 14336 + 4096 * 8), 32 * 29),
])
def test_fp8_weights_have_one_fp32_scale_per_tensor(run_cli, model, weights, tensors):
    # fp8 weights: 1 byte an element and one fp32 scale per tensor (per-tensor scaling, the
    # default of transformer-engine and vLLM's fp8 checkpoints)
    d = run_cli.json("memory", "infer", model, "--dtype", "fp8")
    assert d["detail"]["weights_quantised_bytes"] == weights
    assert d["detail"]["weights_scales_bytes"] == 4 * tensors


def test_adafactor_states_of_llama2_7b_by_hand(run_cli):
    # Adafactor (Shazeer & Stern 2018): a row and a column accumulator per matrix, vectors whole,
    # in fp32 (4 B). llama2-7b per layer: q, k, v, o 4 x (4096 + 4096); gate, up, down
    # 3 x (11008 + 4096); two RMSNorm vectors 2 x 4096. Outside the layers: the embedding
    # (32000 + 4096), the untied lm_head (32000 + 4096) and the final norm (4096).
    layer = 4 * (4096 + 4096) + 3 * (11008 + 4096) + 2 * 4096
    factors = 32 * layer + 2 * (32000 + 4096) + 4096
    assert factors == 2_836_992
    d = run_cli.json("memory", "train", "llama2-7b", "--optimizer", "adafactor")
    assert d["detail"]["optimizer_states_bytes"] == 4 * factors
