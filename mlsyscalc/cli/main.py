"""The `mlsys` entry point: a click group whose command modules load only when used.

Lazy loading keeps `mlsys params` from importing the benchmark harness (and torch with it).
Errors: MlsysError, click usage errors and unreadable files exit 2 with one line; anything else exits 1.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import click

from ..errors import MlsysError

NUMPY_FP_WARNINGS = r"(invalid value|overflow|divide by zero|underflow) encountered"

# command name -> "module:attribute" (modules relative to mlsyscalc.cli). One line per group.
COMMANDS = {
    "models": "models:models",
    "gpus": "gpus:gpus",
    "params": "counts:params",
    "flops": "counts:flops",
    "scaling": "scaling:scaling",
    "bench": "bench:bench",
    "roofline": "roofline:roofline",
    "comm": "comm:comm",
    "memory": "memory:memory",
    "calibrate": "calibrate:calibrate",
    "train": "train:train",
    "serve": "serve:serve",
    "report": "report:report",
    "plan": "plan:plan",
    "compare": "compare:compare",
}


class LazyGroup(click.Group):
    """A click group whose subcommands ("name": "module:attribute") are imported on first use."""

    lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.lazy_commands)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = self.lazy_commands.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        from .options import harden

        return harden(getattr(importlib.import_module(module_name, package="mlsyscalc.cli"), attr))


class MainGroup(LazyGroup):
    lazy_commands = {name: "." + target for name, target in COMMANDS.items()}

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            if args and args[0] not in COMMANDS:
                from ..specs.lookup import suggest

                raise click.UsageError(f"no such command {args[0]!r}{suggest(args[0], COMMANDS)}", ctx) from exc
            raise

    def invoke(self, ctx: click.Context):
        """Bad input -> one line on stderr and exit 2; a bug -> one line and exit 1."""
        try:
            with warnings.catch_warnings():
                # numpy's floating-point warnings: a non-finite result is refused by name before it is printed
                # (cli.render), so the warning would only stand before that one line
                warnings.filterwarnings("ignore", NUMPY_FP_WARNINGS, RuntimeWarning)
                _print_resolved_names()
                return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise

        except MlsysError as exc:
            if _debug(ctx):
                raise
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except OverflowError as exc:  # inputs each in range whose product leaves float64
            if _debug(ctx):
                raise
            click.echo(f"error: these inputs are too large to compute with ({exc}); use smaller sizes", err=True)
            ctx.exit(2)
        except (UnicodeDecodeError, OSError) as exc:  # a file named on the command line
            if _debug(ctx):
                raise
            click.echo(f"error: {_file_error(exc)}", err=True)
            ctx.exit(2)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if _debug(ctx):
                raise
            click.echo(f"unexpected error ({type(exc).__name__}): {exc} [rerun with --debug for a traceback]", err=True)
            ctx.exit(1)


def _print_resolved_names() -> None:
    """GPU family names resolved by specs.gpu.load_gpu ('A100 -> A100-80GB-SXM'): each printed once on stderr,
    as "note: A100 -> A100-80GB-SXM"; every other warning goes where it went (inside catch_warnings)."""
    from ..specs.gpu import NameResolved

    shown: set[str] = set()
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, NameResolved):
            return previous(message, category, filename, lineno, file, line)
        if str(message) not in shown:
            shown.add(str(message))
            click.echo(f"note: {message}", err=True)
    warnings.simplefilter("always", NameResolved)
    warnings.showwarning = show


def _file_error(exc: UnicodeDecodeError | OSError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"a file given is not UTF-8 text (byte {exc.start}: {exc.reason})"
    name = getattr(exc, "filename", None)
    return f"{name}: {exc.strerror or exc}" if name else f"cannot use a file given: {exc}"


def _debug(ctx: click.Context) -> bool:
    return bool(ctx.obj and ctx.obj.get("debug")) or "--debug" in sys.argv


@click.group(cls=MainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="mlsyscalc")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """mlsys: performance modeling for ML systems.

    Parameters, FLOPs, memory, roofline time, scaling laws and communication cost of
    transformer models, and a GPU harness that measures what these calculators predict.
    JSON output (--json) carries raw numbers in base units: counts, FLOPs, bytes, seconds.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="mlsys")
