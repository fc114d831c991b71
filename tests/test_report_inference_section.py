"""The report's inference section (mlsyscalc/report/model_report_infer.py) from a fake `mlsys memory infer` and
`mlsys roofline` whose JSON is fixed here: the tensor-parallel size it picks (and its fallbacks), every table
cell with its unit, the decode batches it sweeps, the point whose kernel shares it shows, and its figures."""

from __future__ import annotations

import pytest

from mlsyscalc.cli.main import COMMANDS
from mlsyscalc.report.model_report import ReportOptions
from mlsyscalc.report.model_report_build import build_report
from mlsyscalc.report.model_report_infer import inference_section

GiB = 2**30
WEIGHTS = {"bf16": 16, "fp8": 8, "int8": 8, "int4": 4}  # GiB at tp 1


def _arg(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


class Fake:
    """memory infer: weights WEIGHTS / tp GiB, KV 128 KiB per token, 1 GiB workspace, 75 GiB usable, the largest
    batch from `max_batch[tp]`; roofline: a sweep point per batch (fits up to `fits_to`) and a step's kernels."""

    def __init__(self, max_batch, fits_to=8):
        self.max_batch, self.fits_to, self.calls = max_batch, fits_to, []

    def __call__(self, argv):
        self.calls.append(list(argv))
        tp = int(_arg(argv, "--tp", 1))
        if argv[:2] == ["memory", "infer"]:
            if _arg(argv, "--max") == "batch":
                batch = self.max_batch[tp]
                return {"max_batch": batch, "fits": batch > 0, "weights_bytes": WEIGHTS["bf16"] * GiB / tp}
            if _arg(argv, "--max") == "context":
                return {"max_context": 123_456, "notes": ["first note", "second note"]}
            dtype, context = _arg(argv, "--dtype"), int(_arg(argv, "--context"))
            weights, kv = WEIGHTS[dtype] * GiB / tp, context * 2**17
            return {"weights_bytes": weights, "kv_cache_bytes": kv, "total_bytes": weights + kv + GiB,
                    "usable_bytes": 75 * GiB, "fits": weights + kv + GiB <= 75 * GiB}
        if argv[0] == "roofline":
            phase = _arg(argv, "--phase")
            if "--sweep" in argv:
                batches = [int(b) for b in _arg(argv, "--sweep").split("=")[1].split(",")]
                return {"sweep": [{"batch": b, "predicted_s": 0.001 * b, "tokens_per_s": 1000.0 * b, "mfu": 0.01 * b,
                                   "mbu": 0.5, "bound": "memory" if b < 16 else "compute",
                                   "fits": b <= self.fits_to} for b in batches]}
            batch = int(_arg(argv, "--batch"))
            ops = [{"name": f"op{i}", "layers": "head" if i == 9 else "layers", "total_s": 0.001 * (i + 1)}
                   for i in range(10)]
            return {"phase": phase, "batch": batch, "predicted_s": 0.1, "bound": "memory", "ops": ops,
                    "comm": [{"name": "all-reduce", "exposed_s": 0.0055}]}
        raise AssertionError(f"unexpected command {argv}")


def _section(fake, **options):
    report = build_report(ReportOptions("llama3-8b", **options), fake, tuple(COMMANDS), {},
                          [("inference", "Inference", inference_section)])
    (sect,) = report.sections
    assert sect.unavailable is None, sect.unavailable
    return sect, "\n".join(sect.lines)


def test_the_smallest_tp_fitting_sixteen_sequences_and_its_tables():
    fake = Fake({1: 4, 2: 10, 4: 20, 8: 64})
    sect, text = _section(fake)
    assert ("Largest batch at 8,192 tokens of context (bf16 weights and KV cache, H100-SXM); the smallest "
            "tensor-parallel size that fits a batch of 16 is used below (tp 4):") in text
    for row in ("| 1 | 4 | 16 | yes |", "| 2 | 10 | 8 | yes |", "| 4 | 20 | 4 | yes |"):
        assert row in text, row
    assert "\n| 8 |" not in text.split("Longest context")[0]  # the search stops at the first tp that fits 16
    assert "Longest context for one sequence at tp 4: 123,456 tokens." in text
    # weights per GPU at tp 4 and the KV of one 8,192-token sequence (1 GiB), each dtype once
    for row in ("| bf16 | 4 | 1 | yes |", "| fp8 | 2 | 1 | yes |", "| int8 | 2 | 1 | yes |", "| int4 | 1 | 1 | yes |"):
        assert row in text, row
    # KV 128 KiB per token: 0.125 GiB at 1,024 tokens ... 16 GiB at 131,072; total = 4 + KV + 1
    for row in ("| 1,024 | 0.125 | 5.12 | yes |", "| 65,536 | 8 | 13 | yes |", "| 131,072 | 16 | 21 | yes |"):
        assert row in text, row
    assert "- first note\n- second note" in text
    memory_fig = next(f for f in sect.figures if f.kind == "inference_memory")
    assert memory_fig.title == "llama3-8b: inference memory per GPU on H100-SXM, tp 4"
    assert memory_fig.data == {"dtypes": {d: WEIGHTS[d] * GiB / 4 for d in WEIGHTS}, "usable_bytes": 75 * GiB,
                               "contexts": {n: n * 2**17 for n in (1024, 4096, 16384, 65536, 131072)}}


def test_decode_sweeps_powers_of_two_up_to_the_largest_batch_and_shows_the_last_fitting_point():
    fake = Fake({1: 4, 2: 10, 4: 20, 8: 64}, fits_to=8)
    sect, text = _section(fake)
    sweeps = [c for c in fake.calls if c[0] == "roofline" and "--sweep" in c]
    decode, prefill = sweeps
    assert _arg(decode, "--sweep") == "batch=1,2,4,8,16" and _arg(decode, "--context") == "8192"
    assert _arg(prefill, "--sweep") == "batch=1,2,4,8,16,32" and _arg(prefill, "--seq") == "4096"
    assert "--no-fit-check" in prefill and "--no-fit-check" not in decode  # prefill of 32 x 4,096 is a what-if
    assert _arg(decode, "--tp") == "4" and _arg(decode, "--gpu") == "H100-SXM"
    assert ("Roofline prediction on tp 4 x H100-SXM, decode at 8,192 tokens of context (batches that fit), time per "
            "output token:") in text
    assert "| batch | time per output token (ms) | tokens/s | MFU | MBU | bound |" in text
    assert "| 16 | 16 | 16,000 | 16.0% | 50.0% | compute |" in text and "| 2 | 2 | 2,000 | 2.0% | 50.0% | memory |" in text
    assert "Prefill of 4,096-token prompts, time to first token:" in text
    points = [c for c in fake.calls if c[0] == "roofline" and "--batch" in c]
    assert [(_arg(c, "--phase"), _arg(c, "--batch")) for c in points] == [("decode", "8"), ("prefill", "1")]
    # the ten kernels and one collective by their share of the 100 ms step: the largest eight
    assert "Where the time goes, decode batch 8 (100 ms, memory-bound):" in text
    table = text.split("Where the time goes, decode batch 8")[1].split("Where the time goes")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| op9 (head) | 10 | 10.0% |", "| op8 | 9 | 9.0% |", "| op7 | 8 | 8.0% |", "| op6 | 7 | 7.0% |",
                    "| op5 | 6 | 6.0% |", "| all-reduce | 5.5 | 5.5% |", "| op4 | 5 | 5.0% |", "| op3 | 4 | 4.0% |"]
    shares = next(f for f in sect.figures if f.kind == "op_share")
    assert list(shares.data) == ["decode, batch 8", "prefill, batch 1"]
    assert shares.data["decode, batch 8"][:2] == [("op9 (head)", pytest.approx(0.1)), ("op8", pytest.approx(0.09))]
    curves = next(f for f in sect.figures if f.kind == "roofline_curves")
    assert [p["batch"] for p in curves.data["decode"]] == [1, 2, 4, 8, 16]
    assert [p["batch"] for p in curves.data["prefill"]] == [1, 2, 4, 8, 16, 32]


def test_without_sixteen_sequences_the_smallest_tp_that_fits_one():
    fake = Fake({1: 0, 2: 3, 4: 8, 8: 12})
    _, text = _section(fake)
    assert "is used below (tp 2):" in text
    assert "| 1 | 0 | 16 | no |" in text and "| 8 | 12 | 2 | yes |" in text  # every size tried
    decode = next(c for c in fake.calls if c[0] == "roofline" and "--sweep" in c)
    assert _arg(decode, "--sweep") == "batch=1,2"  # up to tp 2's largest batch, 3
    assert "does not fit" not in text


def test_when_nothing_fits_the_largest_tp_tried_and_a_what_if_sweep():
    fake = Fake({1: 0, 2: 0, 4: 0, 8: 0}, fits_to=0)
    _, text = _section(fake, gpus=4)  # tp up to min(gpus per node, --gpus) = 4
    assert "is used below (tp 4):" in text and "\n| 8 |" not in text.split("Longest context")[0]
    assert ("**llama3-8b does not fit 8,192 tokens of context on tp 4 x H100-SXM in bf16**; the roofline below is what "
            "it would take if it did (`--no-fit-check`).") in text
    decode = next(c for c in fake.calls if c[0] == "roofline" and "--sweep" in c)
    assert _arg(decode, "--sweep") == "batch=1,2,4,8,16,32,64" and "--no-fit-check" in decode
    assert "(fit not checked), time per output token:" in text
    prefill = [c for c in fake.calls if c[0] == "roofline" and _arg(c, "--phase") == "prefill"]
    assert all(c.count("--no-fit-check") == 1 for c in prefill)  # once, from the common arguments
    point = next(c for c in fake.calls if c[0] == "roofline" and "--batch" in c and _arg(c, "--phase") == "decode")
    assert _arg(point, "--batch") == "1" and point.count("--no-fit-check") == 1  # no sweep point fits: the first


def test_a_large_model_sweeps_decode_to_1024_at_most():
    fake = Fake({1: 5000, 2: 5000, 4: 5000, 8: 5000}, fits_to=4096)
    _, text = _section(fake)
    decode = next(c for c in fake.calls if c[0] == "roofline" and "--sweep" in c)
    assert _arg(decode, "--sweep") == "batch=" + ",".join(str(2**i) for i in range(11))
    assert "is used below (tp 1):" in text
    point = next(c for c in fake.calls if c[0] == "roofline" and "--batch" in c)
    assert _arg(point, "--batch") == "1024"
