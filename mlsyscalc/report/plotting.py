"""What every figure writer shares: matplotlib on the Agg backend (or one clear error naming the
extra that installs it), the allowed file suffixes, and saving one figure in several formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..errors import MlsysError

SUFFIXES = (".png", ".svg")
EXTRA_HINT = "figures need matplotlib: pip install 'mlsyscalc[science]'"


def has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def pyplot():
    """matplotlib.pyplot on the Agg backend; without matplotlib an MlsysError (exit 2) naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise MlsysError(EXTRA_HINT) from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: smaller, faster, searchable
    import matplotlib.pyplot as plt

    return plt


def plain_ticks(*axes: Any) -> None:
    """Plain number labels ('1', '16', '0.5', '1e20') on log axes instead of mathtext powers, which are slow
    to lay out."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for axis in axes:
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}".replace("e+", "e")))
        axis.set_minor_formatter(NullFormatter())


def check_path(path: str | Path, option: str = "--plot", suffixes: Sequence[str] = SUFFIXES) -> Path:
    """A figure path with a known suffix; its folder is created."""
    out = Path(path)
    if out.suffix.lower() not in suffixes:
        raise MlsysError(f"{option} {path}: use a {' or '.join(suffixes)} file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MlsysError(f"{option} {path}: cannot create its folder ({exc.strerror})") from None
    return out


def save(fig: Any, paths: Sequence[str | Path], dpi: int = 120, tight: bool = True) -> list[Path]:
    """Write `fig` to every path (format from the suffix), close it, and return the paths. `tight=False`
    keeps the figure's own margins (one layout pass less per file)."""
    plt = pyplot()
    out = [Path(p) for p in paths]
    try:
        for path in out:
            fig.savefig(path, dpi=dpi, bbox_inches="tight" if tight else None, metadata=_metadata(path))
    except (OSError, ValueError) as exc:
        raise MlsysError(f"cannot write figure {path}: {exc}") from None
    finally:
        plt.close(fig)
    return out


def _metadata(path: Path) -> dict:
    """No creation date in SVGs, so a rerun writes the same file."""
    return {"Date": None} if path.suffix.lower() == ".svg" else {}
