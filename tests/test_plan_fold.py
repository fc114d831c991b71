"""plan's top K shows distinct layouts: one row per (tp, pp, dp, cp, ep, micro-batch), the fastest of its variants,
with `variants` counting the fitting layouts it stands for; --all-variants shows every layout (docs/plan.md)."""

from __future__ import annotations

JOB = ("plan", "llama3-70b", "--gpus", "64", "--seq", "8192", "--global-batch", "128", "--quiet", "--top", "5")
AXES = ("tp", "pp", "dp", "cp", "ep", "micro_batch")


def _group(c: dict) -> tuple:
    return tuple(c["layout"][a] for a in AXES)


def test_top_k_is_distinct_and_counts_its_variants(run_cli):
    folded = run_cli.json(*JOB)
    every = run_cli.json(*JOB, "--all-variants", "--top", "100")
    groups = [_group(c) for c in folded["candidates"]]
    assert len(groups) == 5 and len(set(groups)) == 5
    # unfolded, the five fastest of llama3-70b here differ only in vp: one group
    assert len({_group(c) for c in every["candidates"][:5]}) == 1
    assert [c["variants"] for c in every["candidates"]] == [1] * 100 and every["all_variants"] is True
    # each row is the fastest member of its group: the first of that group in the unfolded ranking
    ranked = every["candidates"]
    for c in folded["candidates"]:
        first = next((r for r in ranked if _group(r) == _group(c)), None)
        if first is not None:
            assert first["step_time_s"] == c["step_time_s"]
    assert folded["candidates"][0]["step_time_s"] == ranked[0]["step_time_s"]
    times = [c["step_time_s"] for c in folded["candidates"]]
    assert times == sorted(times)
    # the variants of the first group: every fitting layout of it, at most the feasible count
    first_group = folded["candidates"][0]["variants"]
    assert first_group > 1 and sum(c["variants"] for c in folded["candidates"]) <= folded["feasible"]
    assert first_group >= sum(_group(r) == groups[0] for r in ranked)


def test_variants_count_is_the_group_size(run_cli):
    """A small search, counted by brute force: --all-variants lists every fitting layout (top 100 covers them)."""
    job = ("plan", "llama2-7b", "--gpus", "8", "--seq", "2048", "--global-batch", "16", "--quiet",
           "--max-micro-batch", "1", "--max-cp", "1", "--even-splits-only", "--fix", "zero=1")
    every = run_cli.json(*job, "--all-variants", "--top", "100")
    assert every["feasible"] == len(every["candidates"]) < 100
    folded = run_cli.json(*job, "--top", "100")
    sizes: dict[tuple, int] = {}
    for c in every["candidates"]:
        sizes[_group(c)] = sizes.get(_group(c), 0) + 1
    assert {_group(c): c["variants"] for c in folded["candidates"]} == sizes
    assert "one row per tp, pp, dp, cp, ep and micro-batch" in " ".join(folded["notes"])
