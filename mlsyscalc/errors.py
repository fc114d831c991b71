"""Errors that mean "the input is wrong": the CLI prints one line and exits 2."""


class MlsysError(ValueError):
    """Bad usage or bad input (unknown model, malformed config, impossible sizes).

    The CLI turns it into one line on stderr and exit code 2; the Python API lets it propagate.
    """


def require(condition: bool, message: str) -> None:
    """Raise MlsysError(message) unless condition holds."""
    if not condition:
        raise MlsysError(message)


def divide(numerator: int, denominator: int, what: str) -> int:
    """Exact integer division for parallel splits (nano-vllm's `divide`), else a clear error."""
    require(denominator > 0, f"{what}: cannot split over {denominator}")
    require(
        numerator % denominator == 0,
        f"{what}: {numerator} is not divisible by {denominator}",
    )
    return numerator // denominator
