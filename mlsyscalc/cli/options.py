"""Options shared by every command, and the checks every option value passes.

`harden(command)` is applied by the lazy command groups to each command they load, so every
command, present or future, rejects with exit 2 and the option's name: an empty string, a
NaN or infinite float, a float beyond 1e300 and an integer beyond 2^53. Options with a physical
range declare it with the types below (`FRACTION`, `POSITIVE`, `NON_NEGATIVE`) or click's own
IntRange/FloatRange; the calculators' options dataclasses check the same ranges again.
"""

from __future__ import annotations

import copy
import math
import weakref
from typing import Any, Callable

import click

from ..specs.lookup import load_model, parse_overrides
from ..specs.model import ModelSpec
from ..validate import MAX_FLOAT, MAX_INT

FRACTION = click.FloatRange(0, 1, min_open=True)  # efficiencies, MFU: (0, 1]
POSITIVE = click.FloatRange(0, min_open=True)  # bandwidths, latencies, prices, peaks: > 0
NON_NEGATIVE = click.FloatRange(0)  # overheads: >= 0

_CHECKED_TYPES = (click.types.StringParamType, click.types.FloatParamType, click.types.IntParamType,
                  click.types._NumberRangeBase, click.Path)


def _checked_convert(param_type: click.ParamType) -> Callable:
    """param_type's own conversion followed by the checks every value of every command passes."""
    inner = param_type.convert

    def convert(value: Any, param, ctx):
        if isinstance(value, str) and not value.strip():
            param_type.fail("an empty value is not allowed", param, ctx)
        out = inner(value, param, ctx)
        if isinstance(out, float) and not (math.isfinite(out) and abs(out) <= MAX_FLOAT):
            param_type.fail(f"{value!r} is not a finite number (|x| <= {MAX_FLOAT:g})", param, ctx)
        if isinstance(out, int) and not isinstance(out, bool) and abs(out) > MAX_INT:
            param_type.fail(f"{value!r} is too large (at most 2^53 = {MAX_INT:,})", param, ctx)
        return out
    return convert


_HARDENED: weakref.WeakSet[click.Command] = weakref.WeakSet()  # commands harden() has already seen
# optional dependency -> the extra that installs it (pyproject.toml)
EXTRAS = {"torch": "gpu", "triton": "gpu", "pandas": "gpu", "scipy": "science", "matplotlib": "science"}


def _naming_extras(callback: Callable) -> Callable:
    """callback, with a missing optional dependency turned into MlsysError naming the command and the extra."""
    import functools

    @functools.wraps(callback)
    def run(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except ModuleNotFoundError as exc:
            if exc.name not in EXTRAS:
                raise
            from ..errors import MlsysError

            path = click.get_current_context().command_path.split()[1:]
            raise MlsysError(f"mlsys {' '.join(path)} needs {exc.name}, which is not installed; pip install "
                             f"'mlsyscalc[{EXTRAS[exc.name]}]'") from None
    return run


def harden(command: click.Command) -> click.Command:
    """Give every parameter of command (and of its subcommands) the checked version of its type."""
    if command in _HARDENED:
        return command
    for param in command.params:
        if isinstance(param.type, _CHECKED_TYPES):
            checked = copy.copy(param.type)  # never the shared click.STRING/INT/FLOAT instances
            vars(checked)["convert"] = _checked_convert(checked)  # an instance attribute over the method
            param.type = checked
    if not isinstance(command, click.Group) and command.callback is not None:
        command.callback = _naming_extras(command.callback)
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    _HARDENED.add(command)
    return command


def model_argument(func: Callable) -> Callable:
    """MODEL argument plus repeatable `--set KEY=VALUE` config overrides."""
    func = click.option(
        "--set", "overrides", multiple=True, metavar="KEY=VALUE",
        help="Override a config.json key before normalising (what-if), e.g. --set num_hidden_layers=48.",
    )(func)
    return click.argument("model", metavar="MODEL")(func)


def resolve_model(model: str, overrides: tuple[str, ...]) -> ModelSpec:
    return load_model(model, parse_overrides(overrides) or None)


def positive_int(name: str, default: int, help: str) -> Callable:
    return click.option(name, type=click.IntRange(min=1), default=default, show_default=True, help=help)


def given(ctx: click.Context, name: str) -> bool:
    """True when the user typed the option (not its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def reject_unused(ctx: click.Context, unused: dict[str, str]) -> None:
    """Exit 2 naming an option the user gave that does not apply, e.g. {"seq": "with --phase decode"}."""
    for name, why in unused.items():
        if given(ctx, name):
            flag = next((p.opts[0] for p in ctx.command.params if p.name == name), name)
            raise click.UsageError(f"{flag} does not apply {why}", ctx)


def efficiency_pairs(items: tuple[str, ...]) -> dict[str, float]:
    """--efficiency KIND=FRACTION items as {kind: fraction in (0, 1]}."""
    from ..errors import MlsysError
    from ..units import parse_count
    from ..validate import fraction

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise MlsysError(f"--efficiency {item!r}: expected KIND=FRACTION")
        out[key.strip()] = fraction(parse_count(value, f"--efficiency {key}"), f"--efficiency {key}")
    return out


def ceilings_from_options(gpu: str | None, calibration: str | None, efficiency: tuple[str, ...],
                          launch_us: float | None, gap_us: float | None = None):
    """The Ceilings that --gpu, --calibration, --efficiency, --launch-us and --gap-us describe (roofline, serve)."""
    from dataclasses import replace

    from ..calc.roofline.calibration import load_ceilings

    ceilings = load_ceilings(gpu, calibration, launch_s=None if launch_us is None else launch_us * 1e-6)
    if gap_us is not None:
        ceilings = replace(ceilings, gap_s=gap_us * 1e-6)
    if not efficiency:
        return ceilings
    note = "efficiencies set with --efficiency are used as given at any --clocks (no steady-state derating)"
    return replace(ceilings.with_efficiency(**efficiency_pairs(efficiency)), steady=None, notes=ceilings.notes + (note,))


def host_options(func: Callable) -> Callable:
    """--host-us-per-kernel, --host-ms-per-layer: the host's eager costs (`mlsys bench host` measures them),
    passed on as `host` = (seconds per kernel or None, seconds per layer or None)."""
    import functools

    @click.option("--host-us-per-kernel", type=POSITIVE, default=None,
                  help="Host microseconds per priced kernel of an eager one-GPU training step (default 29, or the "
                       "calibration's host object; `mlsys bench host` measures yours).")
    @click.option("--host-ms-per-layer", type=POSITIVE, default=None,
                  help="Host milliseconds per decoder layer of an eager prefill/decode (--launch eager; default "
                       "0.699, or the calibration's).")
    @functools.wraps(func)
    def wrapper(*args, host_us_per_kernel, host_ms_per_layer, **kwargs):
        host = (None if host_us_per_kernel is None else host_us_per_kernel * 1e-6,
                None if host_ms_per_layer is None else host_ms_per_layer * 1e-3)
        return func(*args, host=host, **kwargs)
    return wrapper


def fsdp_framework(framework: Any, fsdp: str | None) -> Any:
    """The training framework --fsdp implies: FSDP is PyTorch's, so `--fsdp` without `--framework` prices
    `--framework torch`; `--fsdp` with an explicit `--framework megatron` is a conflict (exit 2)."""
    if fsdp is None:
        return framework
    if given(click.get_current_context(), "framework"):
        if framework != "torch":
            raise click.UsageError(f"--fsdp {fsdp} is PyTorch's FSDP, which --framework {framework} does not run: "
                                   "drop --framework or use --zero with Megatron", click.get_current_context())
        return framework
    return "torch"


def world_dp(gpus: int | None, dp: int | None, tp: int, pp: int, cp: int) -> int:
    """dp from --gpus (the world size) as `mlsys train` derives it, gpus / (tp pp cp); --dp given too must agree
    (exit 2 naming both); neither: 1."""
    from ..errors import divide

    if gpus is None:
        return 1 if dp is None else dp
    derived = divide(gpus, tp * pp * cp, f"rule gpus % (tp*pp*cp) == 0: --gpus {gpus} over tp*pp*cp = {tp * pp * cp}")
    if dp is not None and dp != derived:
        raise click.UsageError(f"--gpus {gpus} does not match --dp {dp}: tp*pp*dp*cp = {tp * pp * dp * cp}; give "
                               f"one of them (--gpus {gpus} means dp {derived})", click.get_current_context())
    return derived
