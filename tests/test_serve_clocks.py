"""`mlsys serve --clocks`: every iteration priced at the card's burst or sustained clocks (calc.roofline.steady)."""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.ops import resolve_ceilings
from mlsyscalc.calc.serve.simulator import ServeOptions, simulate
from mlsyscalc.calc.serve.workload import from_trace
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.lookup import load_model

SPEC = load_model("llama3-8b")


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200"])
def test_a_busy_server_at_sustained_clocks_is_never_faster(gpu):
    work = from_trace([(0.0, 1500, 64)] * 64, "t")
    ceil = resolve_ceilings(gpu)
    burst, steady = (simulate(SPEC, ceil, work, ServeOptions(clocks=c)) for c in ("burst", "sustained"))
    assert steady.metrics["makespan_s"] > burst.metrics["makespan_s"]
    assert all(s >= b - 1e-12 for s, b in zip(steady.latencies["e2e"], burst.latencies["e2e"]))
    assert burst.metrics == simulate(SPEC, ceil, work, ServeOptions()).metrics   # burst is the default


def test_unknown_clocks_are_refused():
    with pytest.raises(MlsysError, match="clocks"):
        simulate(SPEC, resolve_ceilings("H100-SXM"), from_trace([(0.0, 10, 2)], "t"), ServeOptions(clocks="fast"))
