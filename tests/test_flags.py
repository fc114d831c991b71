"""One vocabulary of flags (docs/cli.md, "One vocabulary of flags"): --gpus is the world size everywhere, one
default GPU, family names resolved by one rule in every command, --fsdp implying --framework torch."""

from __future__ import annotations

import json

import pytest

from mlsyscalc.specs.gpu import DEFAULT_GPU

JOB = ("--seq", "2048", "--global-batch", "64", "--tp", "2", "--pp", "2")


def test_memory_train_gpus_derives_dp(run_cli):
    """--gpus 32 with tp 2 x pp 2 is dp 8: the same bytes as --dp 8, and the same as --world-size checks."""
    by_gpus = run_cli.json("memory", "train", "llama2-13b", "--gpus", "32", "--tp", "2", "--pp", "2", "--zero", "1")
    by_dp = run_cli.json("memory", "train", "llama2-13b", "--dp", "8", "--tp", "2", "--pp", "2", "--zero", "1")
    assert by_gpus["parallel"]["dp"] == 8 and by_gpus["parallel"]["world_size"] == 32
    assert by_gpus["total_bytes"] == by_dp["total_bytes"]
    single = run_cli.json("memory", "train", "llama2-13b", "--tp", "2", "--pp", "2", "--zero", "1")
    assert single["optimizer_bytes"] == 8 * by_gpus["optimizer_bytes"]  # ZeRO-1 shards over dp 8


@pytest.mark.parametrize("args,msg", [
    (("--gpus", "32", "--dp", "4", "--tp", "2", "--pp", "2"), "--gpus 32 does not match --dp 4"),
    (("--gpus", "30", "--tp", "4"), "gpus % (tp*pp*cp) == 0"),
])
def test_memory_train_refuses_contradictions(run_cli, args, msg):
    code, out, err = run_cli("memory", "train", "llama2-13b", *args)
    assert code == 2 and msg in err and out == ""


def test_comm_step_gpus_derives_dp(run_cli):
    by_gpus = run_cli.json("comm", "step", "llama2-7b", "--gpus", "16", "--tp", "8")
    by_dp = run_cli.json("comm", "step", "llama2-7b", "--dp", "2", "--tp", "8")
    assert by_gpus["layout"]["dp"] == 2 and by_gpus["gpus"] == 16
    assert by_gpus["layout"] == by_dp["layout"]
    code, _, err = run_cli("comm", "step", "llama2-7b", "--gpus", "16", "--dp", "4", "--tp", "8")
    assert code == 2 and "does not match" in err


def test_one_default_gpu(run_cli):
    """train and plan no longer demand --gpu: they take H100-SXM, as serve, roofline and memory do."""
    train = run_cli.json("train", "llama2-7b", "--gpus", "8", *JOB)
    named = run_cli.json("train", "llama2-7b", "--gpus", "8", "--gpu", DEFAULT_GPU, *JOB)
    assert train["gpu"] == DEFAULT_GPU and train["step_time_s"] == named["step_time_s"]
    best = run_cli.json("plan", "llama2-7b", "--gpus", "8", "--seq", "2048", "--global-batch", "64", "--top", "1",
                        "--quiet")
    assert best["gpu"] == DEFAULT_GPU and best["cluster"] == "hgx-h100"
    memory = run_cli.json("memory", "infer", "llama2-7b")
    assert memory["gpu"] == DEFAULT_GPU and memory["fits"] is True
    assert run_cli.json("roofline", "llama2-7b", "--phase", "decode", "--batch", "1", "--context", "128")["gpu"] == DEFAULT_GPU


def test_memory_max_solves_on_the_default_gpu(run_cli):
    solved = run_cli.json("memory", "infer", "llama2-7b", "--max", "batch")
    named = run_cli.json("memory", "infer", "llama2-7b", "--max", "batch", "--gpu", DEFAULT_GPU)
    assert solved["max_batch"] == named["max_batch"] > 1


@pytest.mark.parametrize("argv", [
    ["memory", "infer", "llama2-7b", "--gpu", "A100"],
    ["memory", "train", "llama2-7b", "--gpu", "a100"],
    ["roofline", "llama2-7b", "--phase", "decode", "--batch", "1", "--context", "128", "--gpu", "A100"],
    ["train", "llama2-7b", "--gpus", "8", "--gpu", "A100", *JOB],
    ["compare", "llama2-7b", "--task", "memory", "--cards", "A100,h100"],
])
def test_family_names_resolve_the_same_way_everywhere(run_cli, argv):
    """A100 is a family (40 GB and 80 GB SXM): every command picks the 80 GB SXM card and says so once."""
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    assert err.lower().count("note: a100 -> a100-80gb-sxm") == 1  # the name as typed
    data = json.loads(out)
    gpu = data["cards"][0]["gpu"] if "cards" in data else data["gpu"]
    assert gpu == "A100-80GB-SXM"


def test_exact_names_resolve_silently_and_unknown_ones_fail(run_cli):
    code, out, err = run_cli("memory", "infer", "llama2-7b", "--gpu", "H100", "--json")
    assert code == 0 and err == "" and json.loads(out)["gpu"] == "H100-SXM"
    code, out, err = run_cli("memory", "infer", "llama2-7b", "--gpu", "A10")
    assert code == 2 and "unknown GPU 'A10'" in err and out == ""


def test_fsdp_implies_the_torch_framework(run_cli):
    """--fsdp is PyTorch's FSDP: priced as --framework torch, not Megatron's ZeRO-3 under an FSDP label."""
    base = ("train", "llama2-7b", "--gpus", "8", "--seq", "2048", "--global-batch", "8")
    fsdp = run_cli.json(*base, "--fsdp", "full_shard")
    torch = run_cli.json(*base, "--zero", "3", "--framework", "torch")
    megatron = run_cli.json(*base, "--zero", "3")
    assert fsdp["framework"] == "torch" and fsdp["layout"]["zero"] == 3
    assert fsdp["step_time_s"] == torch["step_time_s"] != megatron["step_time_s"]
    mem = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--fsdp", "full_shard")
    mem_torch = run_cli.json("memory", "train", "llama2-7b", "--dp", "8", "--zero", "3", "--framework", "torch")
    assert mem["framework"] == "torch" and mem["total_bytes"] == mem_torch["total_bytes"]


@pytest.mark.parametrize("argv", [
    ["train", "llama2-7b", "--gpus", "8", "--global-batch", "8", "--fsdp", "full_shard", "--framework", "megatron"],
    ["memory", "train", "llama2-7b", "--fsdp", "shard_grad_op", "--framework", "megatron"],
])
def test_fsdp_with_megatron_is_a_conflict(run_cli, argv):
    code, out, err = run_cli(*argv)
    assert code == 2 and "--fsdp" in err and "--framework megatron" in err and out == ""


def test_compare_cards_and_count(run_cli):
    """--cards is the list, --gpus N the count; the older --gpus LIST and --num-gpus N give the same answer."""
    new = run_cli.json("compare", "llama3-8b", "--cards", "h100,b200", "--gpus", "16", "--seq", "2048")
    code, out, err = run_cli("compare", "llama3-8b", "--gpus", "h100,b200", "--num-gpus", "16", "--seq", "2048",
                             "--json")
    assert code == 0 and "now --cards h100,b200" in err
    old = json.loads(out)
    assert new["gpus"] == old["gpus"] == 16
    assert [c["time_s"] for c in new["cards"]] == [c["time_s"] for c in old["cards"]]


@pytest.mark.parametrize("args,msg", [
    (("--cards", "h100", "--gpus", "8", "--num-gpus", "16"), "disagree"),
    (("--cards", "h100", "--gpus", "h100,b200"), "give the cards once"),
    (("--gpus", "8"), "--cards"),
    (("--cards", "h100", "--gpus", "0"), "positive GPU count"),
])
def test_compare_refuses_contradictions(run_cli, args, msg):
    code, out, err = run_cli("compare", "llama3-8b", *args)
    assert code == 2 and msg in err and out == ""
