"""`mlsys models|gpus|params|flops` through click's CliRunner, parsing --json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_params_json_contract(run_cli):
    data = run_cli.json("params", "llama2-7b")
    for key in ("model", "total_params", "active_params", "embedding_params", "lm_head_params", "breakdown"):
        assert key in data
    assert data["total_params"] == 6_738_415_616
    assert sum(data["breakdown"].values()) == data["total_params"]
    assert all(isinstance(v, int) for v in data["breakdown"].values())


def test_flops_json_contract(run_cli):
    data = run_cli.json("flops", "llama2-7b", "--batch", "1", "--seq", "2048")
    for key in ("model", "batch", "seq", "forward_flops", "backward_flops", "train_step_flops",
                "flops_per_token", "breakdown"):
        assert key in data
    assert data["forward_flops"] == 29_261_612_187_648
    assert data["backward_flops"] == 2 * data["forward_flops"]
    assert data["train_step_flops"] == 3 * data["forward_flops"]
    assert sum(data["breakdown"].values()) == data["forward_flops"]


def test_alias_is_case_insensitive_and_exact(run_cli):
    assert run_cli.json("params", "META-LLAMA/Llama-2-7b-HF")["model"] == "llama2-7b"
    code, _, err = run_cli("params", "Qwen2-7B")  # never silently becomes another model
    assert code == 2 and "did you mean" in err


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_other_formats_render(run_cli, fmt):
    code, out, _ = run_cli("params", "mixtral-8x7b", "--format", fmt)
    assert code == 0
    assert "46,702,792,704" in out or "46702792704" in out


def test_csv_is_parseable(run_cli):
    import csv
    import io

    code, out, _ = run_cli("flops", "gpt2", "--seq", "128", "--format", "csv")
    assert code == 0
    rows = dict(csv.reader(io.StringIO(out)))
    assert int(rows["forward_flops"]) == run_cli.json("flops", "gpt2", "--seq", "128")["forward_flops"]


def test_config_path_and_folder(run_cli, tmp_path):
    from mlsyscalc.specs.lookup import builtin_configs

    cfg = {k: v for k, v in builtin_configs()["llama3-8b"].items() if not k.startswith("_")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    by_file = run_cli.json("params", str(tmp_path / "config.json"))
    by_dir = run_cli.json("params", str(tmp_path))
    assert by_file["total_params"] == by_dir["total_params"] == 8_030_261_248


def test_set_overrides_a_key(run_cli):
    base = run_cli.json("params", "llama2-7b")
    deeper = run_cli.json("params", "llama2-7b", "--set", "num_hidden_layers=48")
    per_layer = (base["total_params"] - base["embedding_params"] - base["lm_head_params"] - 4096) // 32
    assert deeper["total_params"] - base["total_params"] == 16 * per_layer


def test_models_list_and_show(run_cli):
    names = {m["name"] for m in run_cli.json("models")["models"]}
    assert {"gpt2", "llama2-7b", "deepseek-v3", "phi3-mini", "falcon-7b"} <= names
    spec = run_cli.json("models", "show", "gemma2-9b")
    assert spec["head_dim"] == 256 and spec["q_dim"] == 4096 and spec["hidden_size"] == 3584
    assert spec["norms_per_layer"] == 4


def test_gpus_list(run_cli):
    gpus = {g["name"]: g for g in run_cli.json("gpus")["gpus"]}
    assert len(gpus) >= 9
    h100 = next(g for g in gpus.values() if "h100" in [a.lower() for a in g["aliases"]])
    assert h100["sm_count"] == 132
    assert h100["peak_flops"]["bf16"] == pytest.approx(989.4e12, rel=0.01)


BAD_INPUTS = [
    (["params", "no-such-model"], "unknown model"),
    (["flops", "llama2-7b", "--batch", "0"], "--batch"),
    (["flops", "llama2-7b", "--batch", "-3"], "--batch"),
    (["flops", "llama2-7b", "--seq", "abc"], "--seq"),
    (["flops", "llama2-7b", "--phase", "decode"], "context"),
    (["params", "llama2-7b", "--set", "num_hidden_layers=-1"], "num_hidden_layers"),
    (["params", "llama2-7b", "--set", "num_hiden_layers=4"], "num_hiden_layers"),
    (["params", "llama2-7b", "--set", "novalue"], "KEY=VALUE"),
    (["params", "llama2-7b", "--set", "num_key_value_heads=5"], "divisible"),
    (["models", "show", "gpt5"], "unknown model"),
]


@pytest.mark.parametrize("args, needle", BAD_INPUTS)
def test_bad_input_exits_2_with_one_clear_line(run_cli, args, needle):
    code, out, err = run_cli(*args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err + out


@pytest.mark.parametrize("content, needle", [
    ("{not json", "not valid JSON"),
    ('{"model_type": "bert", "hidden_size": 8}', "unsupported model_type"),
    ('{"model_type": "llama", "hidden_size": 64}', "missing key"),
    ("[1, 2]", "JSON object"),
])
def test_malformed_configs(run_cli, tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    code, _, err = run_cli("params", str(path))
    assert code == 2 and needle in err and str(path) in err


def test_folder_without_config(run_cli, tmp_path):
    code, _, err = run_cli("params", str(tmp_path))
    assert code == 2 and "no config.json" in err


def test_cli_is_import_light_and_fast():
    """The calculator path imports no torch/triton/pandas/matplotlib and answers quickly. Times are CPU
    seconds (process_time, and the child's rusage), so a loaded machine does not fail the check."""
    import resource
    probe = (
        "import sys, time; t=time.process_time();"
        "from mlsyscalc.cli.main import main;"
        "sys.argv=['mlsys','flops','llama2-7b','--json'];"
        "import io, contextlib; buf=io.StringIO()\n"
        "try:\n  with contextlib.redirect_stdout(buf): main()\nexcept SystemExit as e: assert e.code==0, e.code\n"
        "heavy=[m for m in ('torch','triton','pandas','matplotlib','scipy') if m in sys.modules];"
        "print(heavy, time.process_time()-t)"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    heavy, in_process = out.rsplit("]", 1)
    assert heavy + "]" == "[]"
    assert float(in_process) < 0.5
    assert child_cpu < 3.0  # interpreter start-up included


def test_python_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "mlsyscalc", "params", "gpt2", "--json"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["total_params"] == 124_439_808


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["memory", "train", "gpt2", "--json"],
                                  ["roofline", "llama2-7b", "--gpu", "h100", "--json"],
                                  ["comm", "all-reduce", "--size", "1GiB", "--gpus", "8", "--json"],
                                  ["scaling", "optimal", "--compute", "1e23", "--json"]])
def test_every_group_is_import_light(argv):
    """Help pages and calculator commands never pull in torch, triton, pandas or matplotlib."""
    probe = (
        "import sys, io, contextlib\nfrom mlsyscalc.cli.main import main\n"
        f"sys.argv=['mlsys', *{argv!r}]\nbuf=io.StringIO()\n"
        "try:\n  with contextlib.redirect_stdout(buf): main()\nexcept SystemExit as e: assert e.code in (0, None), e.code\n"
        "print([m for m in ('torch','triton','pandas','matplotlib') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
