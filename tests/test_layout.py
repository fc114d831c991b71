"""One parallel layout, one set of rules (calc/parallel/layout.py): `mlsys train`, `mlsys memory train` and
`mlsys comm step` refuse the same broken layout with exit 2 and the same message, and `plan` (which builds
its candidates as train options) skips what they refuse."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.parallel.layout import Layout
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

TRAIN = ("train", "llama2-7b", "--global-batch", "64", "--gpu", "h100")
MEMORY = ("memory", "train", "llama2-7b")
COMM = ("comm", "step", "llama2-7b")

# rule -> (the message it prints, the same broken layout as each command spells it; None: not a flag there)
RULES = {
    "world": ("rule tp*pp*dp*cp == gpus: 2*1*2*1 = 4, not ",
              {TRAIN: ("--gpus", "8", "--tp", "2", "--dp", "2"), MEMORY: ("--tp", "2", "--dp", "2", "--world-size", "8"),
               COMM: None}),
    "vp needs pp": ("rule vp needs pp > 1: the interleaved schedule splits a pipeline",
                    {TRAIN: ("--gpus", "8", "--vp", "2"), MEMORY: ("--vp", "2"), COMM: ("--interleave", "2")}),
    "vp needs 1f1b": ("--vp interleaves the 1F1B schedule: not with --schedule gpipe",
                      {TRAIN: ("--gpus", "8", "--pp", "2", "--vp", "2", "--schedule", "gpipe"),
                       MEMORY: ("--pp", "2", "--vp", "2", "--grad-accum", "2", "--schedule", "gpipe"), COMM: None}),
    "seq over 2cp": ("rule seq % (2*cp) == 0: load-balanced context parallelism splits each sequence into 2*cp "
                     "chunks: 2050 is not divisible by 4",
                     {TRAIN: ("--gpus", "8", "--cp", "2", "--seq", "2050"), MEMORY: ("--cp", "2", "--seq", "2050"),
                      COMM: ("--cp", "2", "--seq", "2050")}),
    "seq over tp with sp": ("rule (seq/cp) % tp == 0 with --sp: 1026 is not divisible by 4",
                            {TRAIN: ("--gpus", "8", "--tp", "4", "--sp", "--seq", "1026"),
                             MEMORY: ("--tp", "4", "--sp", "--seq", "1026"), COMM: ("--tp", "4", "--sp", "--seq", "1026")}),
    "experts": ("--ep 2: llama2-7b has no routed experts",
                {TRAIN: ("--gpus", "8", "--ep", "2"), MEMORY: ("--ep", "2", "--dp", "2"), COMM: ("--ep", "2", "--dp", "2")}),
}
CASES = [(rule, command, args) for rule, (_, spellings) in RULES.items()
         for command, args in spellings.items() if args is not None]


@pytest.mark.parametrize("rule,command,args", CASES, ids=[f"{r}-{c[0]}" for r, c, _ in CASES])
def test_every_rule_exits_2_with_its_one_message(run_cli, rule, command, args):
    code, out, err = run_cli(*command, *args)
    assert code == 2, f"exit {code}: {out}{err}"
    assert RULES[rule][0] in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # one message, not one per calculator


def test_each_rule_reads_alike_in_every_command(run_cli):
    """Memory and comm used to say `--seq over --cp` and `cp: sequence length` for train's seq % (2*cp)."""
    for rule, (message, spellings) in RULES.items():
        lines = {run_cli(*command, *args)[2].strip() for command, args in spellings.items() if args is not None}
        assert all(message in line for line in lines), (rule, lines)


def test_the_sequence_rule_is_load_balanced_context_parallelism():
    spec = load_model("llama2-7b")
    Layout(cp=2).validate(spec, seq=2052)  # 4 chunks of 513
    with pytest.raises(MlsysError, match=r"2\*cp"):
        Layout(cp=2).validate(spec, seq=2050)  # seq % cp == 0, but not 2*cp chunks
    Layout(cp=2, tp=2, sp=True).validate(spec, seq=2052)  # 1026 a context rank, 513 a TP rank
    Layout(tp=3, sp=False).validate_sequence(2047)  # no sequence parallelism, no sequence rule


def test_world_and_experts_fold_over_tp_cp_dp():
    mixtral = load_model("mixtral-8x7b")
    Layout(tp=2, cp=2, dp=2, ep=8, etp=1, sp=True).validate(mixtral, seq=4096, gpus=8)  # ep 8 over tp*cp*dp = 8
    with pytest.raises(MlsysError, match="not --gpus 16"):
        Layout(tp=2, dp=2).validate(mixtral, seq=4096, gpus=16)
    with pytest.raises(MlsysError, match="--zero must be 0, 1, 2 or 3"):
        Layout(zero=4).validate_sizes()
