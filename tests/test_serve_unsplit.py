"""Engine terms of `mlsys serve` for TensorRT-LLM 0.9-era engines: unsplit decode attention and NCCL all-reduces."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.roofline.paged import DECODE_CTA_STREAM_BPS, decode_splits
from mlsyscalc.calc.serve.simulator import ServeOptions, iteration_cost
from mlsyscalc.cli.main import cli
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")  # 32 layers, 8 KV heads of 128, 16-bit KV: 512 bytes a key a KV head (K and V)


def _attention_s(gpu: str, tp: int, splits: int, keys: int) -> float:
    opts = ServeOptions(tp=tp, dtype="fp16", max_decode_splits=splits)
    return iteration_cost(SPEC, resolve_ceilings(gpu), opts).decode_attention_s(1, keys + 1)


@pytest.mark.parametrize("gpu, arch", [("H100-SXM", "Hopper"), ("A100-80GB-SXM", "Ampere")])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_unsplit_decode_grows_by_the_cta_rate_whatever_the_tp(gpu, arch, tp):
    # one sequence, unsplit: 8 / tp CTAs a layer, each streaming 4096 keys x 512 B / (8 / tp) more at the CTA rate
    extra = _attention_s(gpu, tp, 1, 8192) - _attention_s(gpu, tp, 1, 4096)
    want = 32 * 4096 * 512 * 8 / tp / (8 / tp * DECODE_CTA_STREAM_BPS[arch])
    assert extra == pytest.approx(want, rel=0.01)
    assert want == pytest.approx(1.14e-3 if arch == "Hopper" else 1.60e-3, rel=0.01)


def test_split_decode_is_what_it_was():
    # the default (FlashAttention's rule, up to 64 splits) at batch 1 spreads the keys over many CTAs: far faster
    split = _attention_s("H100-SXM", 1, 64, 8192) - _attention_s("H100-SXM", 1, 64, 4096)
    unsplit = _attention_s("H100-SXM", 1, 1, 8192) - _attention_s("H100-SXM", 1, 1, 4096)
    assert split < unsplit / 5
    assert decode_splits(8, 132, 64, 1) == 1 and decode_splits(8, 132, 64) > 1


def test_all_reduce_option_reaches_the_roofline():
    assert ServeOptions().roofline.all_reduce == "custom"
    assert ServeOptions(all_reduce="nccl").roofline.all_reduce == "nccl"
    ceil = resolve_ceilings("H100-SXM")
    custom = iteration_cost(SPEC, ceil, ServeOptions(tp=4)).decode_s(1, 201)
    nccl = iteration_cost(SPEC, ceil, ServeOptions(tp=4, all_reduce="nccl")).decode_s(1, 201)
    assert nccl > custom  # 64 small all-reduces a step: NCCL's latency is above the one-shot kernel's
    with pytest.raises(MlsysError, match="--all-reduce must be one of nccl, custom"):
        ServeOptions(all_reduce="ring").validate()
    with pytest.raises(MlsysError, match="--max-decode-splits must be a positive integer"):
        ServeOptions(max_decode_splits=0).validate()


@pytest.mark.parametrize("args, message", [(["--max-decode-splits", "0"], "--max-decode-splits"),
                                           (["--all-reduce", "ring"], "--all-reduce")])
def test_cli_rejects_bad_engine_terms(args, message):
    result = CliRunner().invoke(cli, ["serve", "llama3-8b", "--rate", "1", "--requests", "5", *args])
    assert result.exit_code == 2
    assert message in result.output
