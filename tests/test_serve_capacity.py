"""`mlsys serve --max-rate` and `--min-gpus`: the capacity search agrees with a fine sweep and with single runs."""

from __future__ import annotations

import io

import pytest

from mlsyscalc.calc.serve import capacity as serve_capacity

SLO = "ttft_p99=0.1,tpot_p99=0.02"
BASE = ("serve", "llama3-8b", "--slo", SLO)  # 1,000 requests of 512 + 128 tokens, seed 0


@pytest.fixture(scope="module")
def found():
    import json

    from click.testing import CliRunner

    from mlsyscalc.cli.main import cli

    result = CliRunner().invoke(cli, [*BASE, "--max-rate", "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_the_search_agrees_with_a_fine_sweep(run_cli, found):
    """Every swept rate up to the answer meets the SLO and every one past the next probe misses it: the highest
    swept rate that holds is within the tolerance of the answer, and the first that fails lies above it."""
    best = found["max_rate_requests_per_s"]
    rates = [round(best * (0.9 + 0.01 * i), 6) for i in range(21)]  # 1% steps from 0.9x to 1.1x
    sweep = run_cli.json(*BASE, "--sweep", "rate=" + ",".join(map(str, rates)))["sweep"]
    held = [p["rate_per_s"] for p in sweep if p["slo"]["met"]]
    failed = [p["rate_per_s"] for p in sweep if not p["slo"]["met"]]
    assert held and failed
    assert max(held) <= best * (1 + serve_capacity.REL_TOL) and best < min(failed)
    assert max(held) < min(failed)  # monotone at this resolution
    assert found["next_rate_requests_per_s"] - best <= serve_capacity.REL_TOL * best


def test_the_answer_is_a_simulated_point(run_cli, found):
    """The reported rate is one plain `mlsys serve --rate` run that meets every target; the next probe misses one."""
    best = found["max_rate_requests_per_s"]
    at = run_cli.json(*BASE, "--rate", repr(best))
    assert at["ttft_p99_s"] == found["at_max_rate"]["ttft_p99_s"] and at["slo"]["met"]
    assert at["ttft_p99_s"] <= 0.1 and at["tpot_p99_s"] <= 0.02
    nxt = run_cli.json(*BASE, "--rate", repr(found["next_rate_requests_per_s"]))
    assert not nxt["slo"]["met"]
    points = found["points"]
    assert all(p["meets_slo"] for p in points if p["rate_requests_per_s"] <= best)
    assert found["simulations"] == len(points) + 1 <= serve_capacity.MAX_SIMULATIONS and found["monotone"]
    assert best < found["saturation_requests_per_s"] < 2 * best  # the bracket starts at saturation
    assert found["slo"]["met"] and [t["metric"] for t in found["slo"]["terms"]] == ["ttft", "tpot"]


def test_unreachable_slo_names_the_target(run_cli):
    code, _, err = run_cli(*BASE[:2], "--slo", "ttft_p99=0.005,tpot_p99=0.05", "--max-rate", "--requests", "20")
    assert code == 2 and "SLO unreachable" in err and "TTFT p99" in err and "> 0.005 s" in err and "TPOT" not in err


def test_search_within_the_simulation_cap(run_cli, monkeypatch):
    monkeypatch.setattr(serve_capacity, "MAX_SIMULATIONS", 5)
    code, _, err = run_cli(*BASE, "--max-rate", "--requests", "50")
    assert code == 2 and "within 5 simulations" in err


def test_unbounded_slo_is_refused(run_cli):
    code, _, err = run_cli(*BASE[:2], "--slo", "ttft_p99=1000", "--max-rate", "--requests", "20")
    assert code == 2 and "no rate bounds it" in err


@pytest.mark.parametrize("args,message", [
    (["--slo", "ttft=0.1", "--max-rate"], "percentile targets"),
    (["--max-rate"], "percentile targets"),
    ([*BASE[2:], "--max-rate", "--rate", "3"], "does not take --rate"),
    ([*BASE[2:], "--max-rate", "--min-gpus"], "give one"),
    ([*BASE[2:], "--max-rate", "--sweep", "rate=1,2"], "do not combine"),
    ([*BASE[2:], "--max-rate", "--concurrency", "4"], "--concurrency"),
    ([*BASE[2:], "--max-rate", "--max-gpus", "4"], "--max-gpus"),
    ([*BASE[2:], "--min-gpus"], "--rate R or --trace"),
    ([*BASE[2:], "--min-gpus", "--rate", "5", "--max-gpus", "5000"], "at most 1,024"),
])
def test_bad_capacity_input_exits_2(run_cli, args, message):
    code, out, err = run_cli("serve", "llama3-8b", *args, "--requests", "20")
    assert code == 2 and message in err and "Traceback" not in err, (out, err)


def test_min_gpus_is_the_fewest_replicas_that_hold(run_cli):
    """llama3-8b at 60 requests/s (above one GPU's ~40 under this SLO): the answer holds, one replica fewer of its
    tensor-parallel size does not, and every layout of fewer GPUs that was tried missed."""
    args = (*BASE, "--rate", "60", "--requests", "300", "--max-gpus", "8")
    data = run_cli.json(*args, "--min-gpus")
    layout, points = data["layout"], data["points"]
    assert data["min_gpus"] == layout["gpus"] == layout["replicas"] * layout["tp"] and layout["gpus"] >= 2
    assert all(not p["meets_slo"] for p in points if p["gpus"] < data["min_gpus"])
    fewer = [p for p in points if p["tp"] == layout["tp"] and p["replicas"] == layout["replicas"] - 1]
    assert fewer and not fewer[0]["meets_slo"]
    assert not run_cli.json(*args[:-2])["slo"]["met"]  # one GPU alone misses: the plain run agrees


def test_one_replica_is_the_plain_simulation():
    from mlsyscalc.calc.serve.simulator import ServeOptions, WorkloadSpec, simulate
    from mlsyscalc.calc.serve.min_gpus import combined
    from mlsyscalc.calc.serve.workload import parse_length
    from mlsyscalc.cli.options import ceilings_from_options, resolve_model

    spec, ceil = resolve_model("llama3-8b", ()), ceilings_from_options("H100", None, (), None, None)
    work = WorkloadSpec(parse_length("512", "p"), parse_length("64", "o"), 20.0, 200).build()
    plain = simulate(spec, ceil, work, ServeOptions()).metrics
    one = combined(work, 1, lambda w: simulate(spec, ceil, w, ServeOptions()))
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p90_s", "e2e_p99_s", "throughput_requests_per_s"):
        assert one[key] == plain[key], key
    two = combined(work, 2, lambda w: simulate(spec, ceil, w, ServeOptions()))
    assert two["ttft_p99_s"] < one["ttft_p99_s"]  # half the load each


def test_capacity_csv_is_one_row_per_probe(run_cli, found):
    pd = pytest.importorskip("pandas")
    code, text, err = run_cli(*BASE, "--max-rate", "--format", "csv")
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(text))
    assert list(frame["rate_requests_per_s"]) == [p["rate_requests_per_s"] for p in found["points"]]
    assert set(frame["max_rate_requests_per_s"]) == {found["max_rate_requests_per_s"]}
