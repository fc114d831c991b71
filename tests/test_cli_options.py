"""cli/options.py: the checks every option value passes (harden), the helpers that turn options into
calculator inputs (units converted by hand here), and their exit-2 messages word for word."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from mlsyscalc.cli import options
from mlsyscalc.errors import MlsysError
from mlsyscalc.validate import MAX_INT


def _probe():
    """A hardened command echoing its parsed values."""
    @click.group()
    def mlsys():
        pass

    @mlsys.command()
    @click.option("--n", type=int, default=1)
    @click.option("--x", type=float, default=1.0)
    @click.option("--frac", type=options.FRACTION, default=0.5)
    @click.option("--pos", type=options.POSITIVE, default=1.0)
    @click.option("--nonneg", type=options.NON_NEGATIVE, default=0.0)
    @click.option("--name", default="a")
    @click.option("--seq", type=int, default=8)
    @click.option("--phase", default="prefill")
    @click.pass_context
    def probe(ctx, n, x, frac, pos, nonneg, name, seq, phase):
        if phase == "decode":
            options.reject_unused(ctx, {"seq": "with --phase decode", "name": "never"})
        click.echo(f"{n!r} {x!r} {frac!r} {pos!r} {nonneg!r} {name!r}")

    @mlsys.command()
    def needs_scipy():
        raise ModuleNotFoundError("no scipy", name="scipy")

    @mlsys.command()
    def needs_other():
        raise ModuleNotFoundError("no foo", name="foo")

    options.harden(mlsys)
    return mlsys


def _run(*args: str):
    return CliRunner().invoke(_probe(), list(args))


def test_hardened_values_pass_and_their_bounds():
    assert _run("probe", "--n", str(MAX_INT), "--x", "1e300", "--frac", "1", "--nonneg", "0").stdout == (
        f"{MAX_INT} 1e+300 1.0 1.0 0.0 'a'\n")
    assert _run("probe", "--n", str(-MAX_INT), "--x", "-1e300").exit_code == 0


@pytest.mark.parametrize("args,message", [
    (["--n", str(MAX_INT + 1)], f"'{MAX_INT + 1}' is too large (at most 2^53 = {MAX_INT:,})"),
    (["--x", "1e301"], "'1e301' is not a finite number (|x| <= 1e+300)"),
    (["--x", "-inf"], "'-inf' is not a finite number"),
    (["--x", "nan"], "'nan' is not a finite number"),
    (["--name", " "], "an empty value is not allowed"),
    (["--frac", "0"], "0<x<=1"),
    (["--pos", "0"], "x>0"),
    (["--nonneg", "-0.5"], "x>=0"),
])
def test_hardened_refusals_name_the_option(args, message):
    result = _run("probe", *args)
    assert result.exit_code == 2 and message in result.stderr and args[0] in result.stderr


def test_harden_copies_the_shared_types():
    before = click.INT.convert
    _probe()
    assert click.INT.convert == before and "convert" not in vars(click.INT)
    assert click.INT.convert("7", None, None) == 7 and click.STRING.convert(" ", None, None) == " "


def test_missing_optional_dependency_names_command_and_extra():
    result = _run("needs-scipy")
    assert result.exit_code == 1 and isinstance(result.exception, MlsysError)
    assert str(result.exception) == ("mlsys needs-scipy needs scipy, which is not installed; pip install "
                                     "'mlsyscalc[science]'")
    other = _run("needs-other")
    assert isinstance(other.exception, ModuleNotFoundError)   # not an optional extra: left as it is
    assert options.EXTRAS == {"torch": "gpu", "triton": "gpu", "pandas": "gpu", "scipy": "science",
                              "matplotlib": "science"}


def test_reject_unused_names_the_typed_flag_only():
    assert _run("probe", "--phase", "decode").exit_code == 0    # defaults are not "given"
    result = _run("probe", "--phase", "decode", "--seq", "8")    # the default's value, but typed
    assert result.exit_code == 2 and "--seq does not apply with --phase decode" in result.stderr
    result = _run("probe", "--phase", "decode", "--name", "b")
    assert result.exit_code == 2 and "--name does not apply never" in result.stderr


def test_efficiency_pairs():
    assert options.efficiency_pairs(("matmul=0.8", " memory =0.7", "attention=1")) == {
        "matmul": 0.8, "memory": 0.7, "attention": 1.0}
    for item, message in (("matmul", "--efficiency 'matmul': expected KIND=FRACTION"),
                          ("=0.5", "--efficiency '=0.5': expected KIND=FRACTION")):
        with pytest.raises(MlsysError, match=f"^{message}$"):
            options.efficiency_pairs((item,))
    for bad in ("matmul=0", "matmul=1.5"):
        with pytest.raises(MlsysError, match="--efficiency matmul"):
            options.efficiency_pairs((bad,))


def test_ceilings_take_microseconds():
    from mlsyscalc.calc.roofline.calibration import load_ceilings

    base = load_ceilings("h100", None)
    ceilings = options.ceilings_from_options("h100", None, (), 12.0, 3.0)
    assert ceilings.launch_s == pytest.approx(12e-6) and ceilings.gap_s == pytest.approx(3e-6)
    assert options.ceilings_from_options("h100", None, (), None).gap_s == base.gap_s
    tuned = options.ceilings_from_options("h100", None, ("matmul=0.5",), None)
    assert tuned.steady is None and tuned.notes[-1].startswith("efficiencies set with --efficiency are used as given")
    assert tuned.notes[:-1] == base.notes


def test_host_options_convert_to_seconds():
    seen = {}

    @click.command()
    @options.host_options
    def cmd(host):
        seen["host"] = host

    CliRunner().invoke(cmd, ["--host-us-per-kernel", "29", "--host-ms-per-layer", "0.5"])
    assert seen["host"] == (pytest.approx(29e-6), pytest.approx(0.5e-3))
    CliRunner().invoke(cmd, [])
    assert seen["host"] == (None, None)
    assert CliRunner().invoke(cmd, ["--host-us-per-kernel", "0"]).exit_code == 2


def _ctx_call(func, args):
    """Run func inside a command that has a --framework option given as args."""
    out = {}

    @click.command()
    @click.option("--framework", default="megatron")
    def cmd(framework):
        out["value"] = func(framework)

    result = CliRunner().invoke(cmd, args)
    return out.get("value"), result


def test_fsdp_framework_and_world_dp():
    assert _ctx_call(lambda fw: options.fsdp_framework(fw, None), [])[0] == "megatron"
    assert _ctx_call(lambda fw: options.fsdp_framework(fw, "full"), [])[0] == "torch"
    assert _ctx_call(lambda fw: options.fsdp_framework(fw, "full"), ["--framework", "torch"])[0] == "torch"
    _, result = _ctx_call(lambda fw: options.fsdp_framework(fw, "full"), ["--framework", "megatron"])
    assert result.exit_code == 2 and "--fsdp full is PyTorch's FSDP, which --framework megatron does not run" in result.stderr
    assert options.world_dp(None, None, 2, 2, 1) == 1 and options.world_dp(None, 3, 2, 2, 1) == 3
    assert _ctx_call(lambda fw: options.world_dp(64, None, 2, 4, 2), [])[0] == 4
    assert _ctx_call(lambda fw: options.world_dp(64, 4, 2, 4, 2), [])[0] == 4
    assert _ctx_call(lambda fw: options.world_dp(64, 8, 2, 4, 1), [])[0] == 8
    assert "--gpus 64 does not match --dp 4: tp*pp*dp*cp = 32; give one of them (--gpus 64 means dp 8)" in \
        _ctx_call(lambda fw: options.world_dp(64, 4, 2, 4, 1), [])[1].stderr
    with pytest.raises(MlsysError, match="--gpus 60 over tp\\*pp\\*cp = 16"):
        options.world_dp(60, None, 2, 4, 2)
