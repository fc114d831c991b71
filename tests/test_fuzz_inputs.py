"""Bad input, tried as a new user would: every case exits 2 with one message naming the problem.

Each case asserts: exit code 2 (never 1), nothing on stdout (so no number computed from
nonsense, in any format), no traceback, at most one message on stderr (click's usage block
counts as one), the message names the option or the problem, and an answer within 10 s.
"""

from __future__ import annotations

import json
import signal

import pytest
from click.testing import CliRunner

from mlsyscalc.cli.main import cli

# Bad values by the kind of option they are given to.
NOT_INT = ["abc", "1.5", "", "nan", "1e400"]
BAD_COUNT = ["0", "-1", "99999999999999999999"] + NOT_INT  # an option >= 1
BAD_REAL = ["nan", "NaN", "inf", "-inf", "1e400", "-1e400", "abc", ""]  # any float option
BAD_POSITIVE = BAD_REAL + ["0", "-1"]
BAD_FRACTION = BAD_POSITIVE + ["1.5", "2"]
BAD_SIZE = ["1e400", "-1", "0", "nan", "inf", "1 parsec", "", "0.1"]

# (command prefix, option, bad values): the option's name must appear in the message.
OPTION_CASES = [
    (["flops", "gpt2"], "--batch", BAD_COUNT),
    (["flops", "gpt2"], "--seq", BAD_COUNT),
    (["flops", "gpt2"], "--context", ["-1", "abc", "nan", "99999999999999999999"]),
    (["roofline", "op", "matmul"], "--m", BAD_COUNT),
    (["roofline", "op", "matmul"], "--k", BAD_COUNT),
    (["roofline", "op", "matmul"], "--launch-us", BAD_REAL + ["-1"]),
    (["roofline", "op", "attention"], "--heads", BAD_COUNT),
    (["roofline", "op", "attention"], "--kv-len", BAD_COUNT),
    (["roofline", "op", "elementwise"], "--flops-per-element", BAD_REAL + ["-1"]),
    (["roofline", "op", "elementwise"], "--elements", BAD_SIZE),
    (["roofline", "op", "softmax"], "--cols", BAD_COUNT),
    (["roofline", "gpt2"], "--batch", BAD_COUNT),
    (["roofline", "gpt2"], "--launch-us", BAD_REAL + ["-1"]),
    (["roofline", "gpt2"], "--tp", BAD_COUNT),
    (["memory", "train", "gpt2"], "--dp", BAD_COUNT),
    (["memory", "train", "gpt2"], "--capacity-factor", BAD_POSITIVE),
    (["memory", "train", "gpt2"], "--zero", ["4", "-1", "nan", "abc"]),
    (["memory", "train", "gpt2", "--gpu", "h100"], "--reserve", ["nan%", "inf%", "150%", "-5%", "1e400", "abc", ""]),
    (["memory", "infer", "gpt2"], "--tp", BAD_COUNT),
    (["memory", "infer", "gpt2"], "--group-size", BAD_COUNT),
    (["memory", "infer", "gpt2"], "--block-size", ["-1", "nan", "abc", "99999999999999999999"]),
    (["comm", "all-reduce"], "--size", BAD_SIZE),
    (["comm", "all-reduce"], "--bandwidth", BAD_POSITIVE),
    (["comm", "all-reduce"], "--latency", BAD_REAL + ["-1"]),
    (["comm", "all-gather"], "--gpus", BAD_COUNT),
    (["comm", "broadcast"], "--inter-bandwidth", BAD_POSITIVE),
    (["comm", "step", "gpt2"], "--dp", BAD_COUNT),
    (["comm", "step", "gpt2"], "--seq", BAD_COUNT),
    (["scaling", "budget", "--compute", "1e23", "--gpu", "h100"], "--mfu", BAD_FRACTION),
    (["scaling", "budget", "--compute", "1e23", "--gpu", "h100"], "--gpus", BAD_COUNT),
    (["scaling", "budget", "--compute", "1e23", "--gpu", "h100"], "--price-per-gpu-hour", BAD_POSITIVE),
    (["scaling", "budget", "--compute", "1e23"], "--peak-tflops", BAD_POSITIVE),
    (["scaling", "optimal"], "--compute", BAD_SIZE),
    (["scaling", "loss", "--tokens", "1T"], "--params", BAD_SIZE),
]

# Cases whose message must name something other than the option: (args, words, one of which is named).
SPECIAL_CASES = [
    (["roofline", "op", "matmul", "--efficiency", "matmul=1.5"], ["efficiency"]),
    (["roofline", "op", "matmul", "--efficiency", "matmul=nan"], ["efficiency"]),
    (["roofline", "op", "matmul", "--efficiency", "matmul=0"], ["efficiency"]),
    (["roofline", "op", "matmul", "--efficiency", "tensor=0.5"], ["efficiency"]),
    (["roofline", "op", "matmul", "--efficiency", "matmul"], ["efficiency"]),
    (["roofline", "llama2-7b", "--efficiency", "memory=-0.5"], ["efficiency"]),
    (["roofline", "op", "attention", "--seq", "4096", "--kv-len", "1024", "--causal"], ["negative", "kv"]),
    (["flops", "gpt2", "--seq", "5000"], ["position"]),
    (["flops", "gpt2", "--context", "1000", "--seq", "100"], ["position"]),
    (["roofline", "gpt2", "--seq", "5000"], ["position"]),
    (["flops", "llama2-7b", "--phase", "decode", "--context", "10", "--seq", "10"], ["--seq"]),
    (["flops", "llama2-7b", "--phase", "decode"], ["context"]),
    (["roofline", "llama2-7b", "--phase", "decode", "--context", "10", "--seq", "10"], ["--seq"]),
    (["roofline", "llama2-7b", "--phase", "train", "--context", "10"], ["--context"]),
    (["roofline", "llama2-7b", "--phase", "prefill", "--dp", "2"], ["--dp"]),
    (["memory", "train", "gpt2", "--sweep", "recompute"], ["--sweep"]),
    (["memory", "infer", "gpt2", "--sweep", "kv_dtype"], ["--sweep"]),
    (["memory", "infer", "llama2-7b", "--dtype", "int4", "--group-size", "5000"], ["--group-size"]),
    (["memory", "infer", "llama2-7b", "--group-size", "64"], ["--group-size"]),
    (["memory", "infer", "llama2-7b", "--gpu", ""], ["--gpu"]),
    (["memory", "infer", "llama2-7b", "--gpu", "H300"], ["unknown GPU"]),
    (["memory", "train", "llama2-7b", "--bytes", "weight=nan"], ["--bytes"]),
    (["memory", "train", "llama2-7b", "--bytes", "weight=-2"], ["--bytes"]),
    (["memory", "train", "llama2-7b", "--bytes", "weight"], ["--bytes"]),
    (["memory", "train", "llama2-7b", "--tp", "3"], ["tp"]),
    (["scaling", "optimal", "--params", "0.5"], ["params"]),
    (["scaling", "loss", "--params", "7B", "--tokens", "0.5"], ["tokens"]),
    (["params", ""], ["MODEL"]),
    (["params", "   "], ["MODEL"]),
    (["params", "/no/such/dir/config.json"], ["no such file"]),
    (["params", "./missing-model"], ["no such file"]),
    (["params", "llama9"], ["unknown model"]),
    (["params", "llama2-7b", "--set", "num_hidden_layers=1e30"], ["--set num_hidden_layers"]),
    (["params", "llama2-7b", "--set", "num_hidden_layers=1000000000000000000000000000000"], ["--set num_hidden_layers"]),
    (["memory", "train", "llama2-7b", "--set", "num_hidden_layers=1000000"], ["--set num_hidden_layers"]),
    (["params", "llama2-7b", "--set", "hidden_size=-4096"], ["--set hidden_size"]),
    (["params", "llama2-7b", "--set", "hidden_size=NaN"], ["--set hidden_size"]),
    (["params", "llama2-7b", "--set", "vocab_size=99999999999999999999"], ["--set vocab_size"]),
    (["params", "llama2-7b", "--set", "partial_rotary_factor=Infinity"], ["--set partial_rotary_factor"]),
    (["params", "llama2-7b", "--set", "sliding_window=\"x\""], ["--set sliding_window"]),
    (["params", "llama2-7b", "--set", "no_such_key=1"], ["--set no_such_key"]),
    (["params", "llama2-7b", "--set", "num_key_value_heads=3"], ["--set num_key_value_heads"]),
    (["params", "llama2-7b", "--set", "model_type=foo"], ["--set model_type"]),
    (["roofline", "op", "elementwise", "--elements", "1e300"], ["--elements"]),
    (["comm", "step", "llama2-7b", "--order", "x,y"], ["order"]),
    (["comm", "step", "llama2-7b", "--overlap", "foo"], ["overlap"]),
    (["memory", "train", "llama2-7b", "--zero", "1", "--fsdp", "full_shard"], ["--fsdp"]),
    (["comm", "all-reduce", "--gpus", "1"], ["GPUs"]),
    (["memory", "train", "mixtral-8x7b", "--capacity-factor", "1e300"], ["--capacity-factor"]),
    (["memory", "train", "llama2-7b", "--capacity-factor", "2"], ["--capacity-factor"]),
    (["roofline", "llama2-7b", "--efficiency", "=0.5"], ["--efficiency"]),
    (["roofline", "llama2-7b", "--sweep", "batch=" + ",".join(str(b) for b in range(1, 100001))], ["--sweep"]),
    (["memory", "infer", "llama2-7b", "--bytes", "kv=1e400"], ["--bytes"]),
    (["params", "llama2-7b", "--set", "=1"], ["--set"]),
    (["params", "llama2-7b", "--set", "tie_word_embeddings=3"], ["--set tie_word_embeddings"]),
    (["comm", "step", "gpt2", "--dp", "4194304"], ["gpus"]),
    (["comm", "step", "gpt2", "--dp", "2", "--gpus", "3"], ["--gpus"]),
    (["comm", "all-reduce", "--cluster", "no-such-cluster"], ["cluster"]),
    (["comm", "all-reduce", "--algo", "magic"], ["--algo"]),
    (["scaling", "budget", "--compute", "1e23"], ["--gpu"]),
    (["scaling", "optimal"], ["compute"]),
    (["scaling", "optimal", "--compute", "1e23", "--params", "7B"], ["one of"]),
    (["scaling", "fit", "/no/such/runs.csv"], ["runs_csv", "RUNS_CSV"]),
    (["scaling", "fit", "{runs_csv}", "--bootstrap", "100000000"], ["--bootstrap"]),
    (["scaling", "fit", "{runs_csv}", "--ci", "1.5"], ["--ci"]),
    (["scaling", "fit", "{runs_csv}", "--starts", "0"], ["start"]),
    (["scaling", "fit", "{runs_csv}", "--starts", "many"], ["--starts"]),
    (["nosuchcommand"], ["no such command"]),
    (["roofline", "op", "matmul", "--dtype", "fp4"], ["--dtype"]),
    (["roofline", "llama2-7b", "--dtype", "int3"], ["dtype"]),
    (["memory", "train", "llama2-7b", "--dtype", "int4"], ["dtype"]),
    (["bench", "comm", "--nproc", "2"], ["GPU"]),
]


def _invoke(args: list[str], timeout_s: int = 10):
    def alarm(signum, frame):
        raise TimeoutError(f"mlsys {' '.join(args)[:200]} took more than {timeout_s} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout_s)
    try:
        return CliRunner().invoke(cli, args, catch_exceptions=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _messages(stderr: str) -> list[str]:
    """The messages on stderr: click's usage block (Usage/Try/Error lines) counts as one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(("Usage:", "Try '"))]


def check_bad(args: list[str], words: list[str], timeout_s: int = 10) -> None:
    result = _invoke(args, timeout_s)
    assert not isinstance(result.exception, TimeoutError), result.exception
    shown = f"mlsys {' '.join(args)[:300]!r} -> exit {result.exit_code}\nstdout: {result.stdout[:300]!r}\nstderr: {result.stderr!r}"
    assert result.exit_code == 2, shown
    assert result.stdout == "", shown
    assert "Traceback" not in result.stderr, shown
    messages = _messages(result.stderr)
    assert len(messages) == 1, shown
    assert messages[0].lower().startswith(("error:", "error: ")), shown
    assert any(word.lower() in messages[0].lower() for word in words), shown


OPTION_PARAMS = [(prefix + [option, value], option) for prefix, option, values in OPTION_CASES for value in values]


@pytest.mark.parametrize("args,option", OPTION_PARAMS, ids=[" ".join(a) for a, _ in OPTION_PARAMS])
def test_bad_option_value(args, option):
    check_bad(args, [option])


@pytest.mark.parametrize("args,words", SPECIAL_CASES, ids=[" ".join(a) for a, _ in SPECIAL_CASES])
def test_bad_invocation(args, words, tmp_path):
    from .cli_cases import write_runs

    runs = str(write_runs(tmp_path / "runs.csv"))
    check_bad([runs if a == "{runs_csv}" else a for a in args], words)


def test_bad_files(tmp_path):
    latin1 = tmp_path / "runs.csv"
    latin1.write_bytes("params,tokens,loss\n1e8,2e9,3.1 \xe9\n".encode("latin-1"))
    check_bad(["scaling", "fit", str(latin1)], ["utf-8"])
    check_bad(["bench", "comm", "--from", "--out", str(latin1)], ["utf-8"])
    config = tmp_path / "config.json"
    config.write_bytes(b"\xff\xfe{}")
    check_bad(["params", str(config)], [str(config)])
    from mlsyscalc.specs.lookup import builtin_configs

    llama = {k: v for k, v in builtin_configs()["llama2-7b"].items() if not k.startswith("_")}
    config.write_text(json.dumps({**llama, "num_hidden_layers": 1e30}))
    check_bad(["params", str(config)], ["num_hidden_layers"])
    config.write_text("[1, 2]")
    check_bad(["params", str(config)], ["object"])
    check_bad(["params", str(tmp_path)], ["config.json"])
    nan_runs = tmp_path / "nan.csv"
    nan_runs.write_text("params,tokens,loss\n1e8,2e9,nan\n")
    check_bad(["scaling", "fit", str(nan_runs)], ["loss"])


def test_the_fuzz_is_large_enough():
    assert len(OPTION_PARAMS) + len(SPECIAL_CASES) >= 300
