"""Bad input to the system commands (train, plan, serve, report, calibrate, bench rows/report/comm --from).

The same checks as tests/test_fuzz_inputs.py (`check_bad`): exit 2, nothing on stdout, no traceback, one
message naming the option, file, line or key. Invocations that used to run for minutes (huge request
counts, sweeps, searches, top-K, micro-batch limits, a node of a billion GPUs) get 5 s: the caps refuse
them at once. The caps themselves are checked at their boundary with small values patched in, so the
largest value a cap allows is run too, within the same 5 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_fuzz_inputs import BAD_COUNT, BAD_FRACTION, BAD_POSITIVE, BAD_REAL, _invoke, check_bad

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "reports" / "models" / "calibration.json"  # a committed H100 fit
CLUSTER = ROOT / "model_specs" / "clusters" / "hgx-h100.json"
MODEL_ROWS = ROOT / "reports" / "models" / "h100_fitset.jsonl"  # measured `mlsys bench model` rows
KERNEL_ROWS = ROOT / "reports" / "matmul" / "rows.jsonl"
NCCL_ROWS = ROOT / "reports" / "comm" / "rows.jsonl"
FAST_S = 5  # former hangs: the caps answer at once

SERVE = ["serve", "llama2-7b", "--rate", "1", "--requests", "20"]
TRAIN = ["train", "llama2-7b", "--gpu", "h100", "--gpus", "8", "--global-batch", "8"]
PLAN = ["plan", "llama2-7b", "--gpu", "h100", "--gpus", "8", "--global-batch", "8"]
REPORT = ["report", "gpt2", "--no-figures", "-o", "{out}"]
BAD_CHOICE = ["magic", "", "1"]

# (command prefix, option, bad values): the option's name must appear in the message.
OPTION_CASES = [
    (SERVE[:4], "--requests", BAD_COUNT + ["100001", "1000000000"]),
    (SERVE[:2] + ["--requests", "20"], "--rate", BAD_POSITIVE),
    (SERVE, "--prefix-len", ["-1", "abc", "nan", "99999999999999999999"]),
    (SERVE, "--max-seqs", BAD_COUNT),
    (SERVE, "--max-batch-tokens", BAD_COUNT),
    (SERVE + ["--scheduler", "sarathi"], "--chunk", BAD_COUNT),
    (SERVE, "--block-size", BAD_COUNT),
    (SERVE, "--kv-blocks", BAD_COUNT),
    (SERVE, "--gpu-memory-utilization", BAD_FRACTION),
    (SERVE, "--iteration-overhead-us", BAD_REAL + ["-1"]),
    (SERVE, "--burstiness", BAD_POSITIVE),
    (SERVE, "--tp", BAD_COUNT + ["3"]),
    (SERVE, "--launch-us", BAD_REAL + ["-1"]),
    (SERVE, "--gap-us", BAD_REAL + ["-1", "1e7"]),
    (SERVE, "--scheduler", BAD_CHOICE),
    (SERVE + ["--scheduler", "vllm"], "--preemption", BAD_CHOICE),
    (SERVE, "--prompt-len", ["0", "-5", "abc", "normal:1", "uniform:5,2", "uniform:0,4", "lognormal:1,-1",
                             "normal:nan,1", "normal:0.5,1", "zipf:1,2", "csv:", "csv:/no/such.csv:len", ""]),
    (SERVE, "--output-len", ["0", "-1", "x", "uniform:1", "normal:inf,1", "1000000000"]),
    (SERVE[:2] + ["--requests", "20"], "--sweep", ["rate=", "rate=a", "rate=nan", "rate=inf", "rate=0", "rate=-1",
                                                   "tps=1,2", "rate=1e400", "rate=1,,2"]),
    (SERVE, "--slo", ["ttft=nan", "ttft=inf", "ttft=0", "ttft=-1", "foo=1", "ttft", "tpot=abc", "ttft=1e400"]),
    (SERVE, "--disagg", ["0:1", "1:0", "a:b", "1", "1:", "-1:2", "1.5:2", "1025:1", "1:1025", "1000000:1000000"]),
    (SERVE + ["--search"], "--max-gpus", BAD_COUNT + ["1", "17", "64"]),
    (["serve", "llama2-13b", "--rate", "1", "--requests", "20", "--draft", "llama2-7b"], "--spec-k",
     BAD_COUNT + ["65", "9007199254740992"]),
    (["serve", "llama2-13b", "--rate", "1", "--requests", "20", "--draft", "llama2-7b"], "--accept",
     ["-0.1", "1.5", "nan", "inf", "abc", ""]),
    (TRAIN[:2] + ["--gpu", "h100"], "--gpus", BAD_COUNT + ["2000000"]),
    (TRAIN, "--seq", BAD_COUNT),
    (TRAIN, "--global-batch", BAD_COUNT),
    (TRAIN, "--micro-batch", BAD_COUNT),
    (TRAIN, "--tp", BAD_COUNT),
    (TRAIN, "--pp", BAD_COUNT),
    (TRAIN, "--dp", BAD_COUNT),
    (TRAIN, "--cp", BAD_COUNT),
    (TRAIN, "--ep", BAD_COUNT),
    (TRAIN, "--vp", BAD_COUNT),
    (TRAIN, "--zero", ["4", "-1", "nan", "abc"]),
    (TRAIN, "--fsdp", ["foo", ""]),
    (TRAIN, "--recompute", BAD_CHOICE),
    (TRAIN, "--comm-sms", ["-1", "abc", "1.5", "99999999999999999999"]),
    (TRAIN, "--capacity-factor", BAD_POSITIVE),
    (TRAIN, "--reserve", ["nan%", "150%", "-5%", "abc", ""]),
    (TRAIN, "--overlap", ["foo", "dp,foo"]),
    (TRAIN + ["--framework", "torch"], "--host-us-per-kernel", BAD_POSITIVE),
    (TRAIN + ["--framework", "torch"], "--host-costs", ['{"op_s": "fast"}', '{"op_s": -1}', '{"magic": 1}', "[1]",
                                                         "{not json", "/no/such/costs.json"]),
    (TRAIN + ["--pp", "2"], "--decoder-first-pipeline-num-layers", ["-1", "abc", "nan", "100"]),
    (TRAIN, "--schedule", BAD_CHOICE),
    (TRAIN, "--framework", BAD_CHOICE),
    (TRAIN, "--attention", BAD_CHOICE),
    (TRAIN, "--dtype", ["int3", "fp4", ""]),
    (PLAN, "--top", BAD_COUNT + ["101", "100000", "9007199254740992"]),
    (PLAN, "--max-micro-batch", BAD_COUNT + ["4097", "9007199254740992"]),
    (PLAN, "--max-cp", BAD_COUNT),
    (PLAN, "--fix", ["tp=\u00b2", "foo=1", "tp", "tp=0", "tp=-1", "tp=abc", "sp=maybe", "recompute=some", "=2",
                     "micro_batch=1.5"]),
    (PLAN, "--comm-sms", ["-1", "abc"]),
    (PLAN, "--capacity-factor", BAD_POSITIVE),
    (REPORT, "--gpus", BAD_COUNT + ["9007199254740992"]),
    (REPORT, "--seq", BAD_COUNT),
    (REPORT, "--context", BAD_COUNT),
    (REPORT, "--micro-batch", BAD_COUNT),
    (REPORT, "--global-batch", BAD_COUNT),
    (REPORT, "--top", BAD_COUNT + ["101", "9007199254740992"]),
    (REPORT, "--tp", BAD_COUNT),
    (REPORT, "--pp", BAD_COUNT),
]

# (args, words one of which the message names); "{tmp}" is the test's folder, "{out}" a fresh output folder.
SPECIAL_CASES = [
    # options that do not apply, or that conflict (docs/cli.md)
    (SERVE + ["--spec-k", "3"], ["--spec-k"]),
    (SERVE + ["--accept", "0.5"], ["--accept"]),
    (SERVE + ["--chunk", "100"], ["--chunk"]),
    (SERVE + ["--scheduler", "orca", "--chunk", "100"], ["--chunk"]),
    (SERVE + ["--scheduler", "sarathi", "--max-batch-tokens", "100"], ["--max-batch-tokens"]),
    (SERVE + ["--scheduler", "orca", "--preemption", "swap"], ["--preemption"]),
    (SERVE + ["--scheduler", "static", "--preemption", "swap"], ["--preemption"]),
    (SERVE + ["--sweep", "rate=1,2"], ["--rate"]),
    (SERVE + ["--disagg", "1:1", "--search"], ["--disagg"]),
    (SERVE + ["--max-gpus", "4"], ["--max-gpus"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--requests", "5"], ["--requests"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--prompt-len", "5"], ["--prompt-len"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--output-len", "5"], ["--output-len"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--seed", "5"], ["--seed"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--burstiness", "0.5"], ["--burstiness"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--sweep", "rate=1,2"], ["--sweep"]),
    (["serve", "llama2-7b", "--trace", "{tmp}/trace.csv", "--rate", "1"], ["--rate"]),
    (SERVE + ["--disagg", "1:1", "--draft", "llama2-7b"], ["--draft"]),
    (SERVE + ["--draft", "gpt2"], ["vocabulary"]),
    (SERVE + ["--scheduler", "static", "--draft", "llama2-7b"], ["--draft"]),
    (SERVE + ["--scheduler", "static", "--disagg", "1:1"], ["--disagg"]),
    (TRAIN + ["--fp8-recipe", "current"], ["--fp8-recipe"]),
    (TRAIN + ["--fp8-params"], ["--fp8-params"]),
    (TRAIN + ["--host-us-per-kernel", "10"], ["--host-us-per-kernel"]),
    (TRAIN + ["--host-costs", '{"op_s": 1e-5}'], ["--host-costs"]),
    (TRAIN + ["--zero", "1", "--fsdp", "full_shard"], ["--fsdp"]),
    (PLAN + ["--fp8-recipe", "current"], ["--fp8-recipe"]),
    (PLAN + ["--host-us-per-kernel", "10"], ["--host-us-per-kernel"]),
    (PLAN + ["--fix", "tp=2", "--fix", "tp=4"], ["twice"]),
    (PLAN + ["--fix", "recompute=full", "--fix", "recompute=none"], ["twice"]),
    (REPORT + ["--dtype", "int3"], ["dtype"]),
    (REPORT + ["--tp", "8"], ["--tp"]),
    (REPORT + ["--tp", "5"], ["--tp", "tp x pp"]),
    (REPORT + ["--pp", "100", "--gpus", "100"], ["--pp"]),
    (REPORT + ["--tp", "3", "--gpus", "8"], ["--gpus"]),
    (REPORT + ["--measured", "{tmp}/no-such-folder"], ["--measured"]),
    (REPORT + ["--measured", "{tmp}/trace.csv"], ["--measured"]),
    (REPORT + ["--measured", "{tmp}/measured-bad"], ["bad.jsonl line 2"]),
    (REPORT + ["--cluster", "{tmp}/cluster-gpn-1e9.json"], ["gpus_per_node"]),
    # former hangs, refused by a cap
    (SERVE[:4] + ["--requests", "1000000000"], ["--requests"]),
    (SERVE[:2] + ["--sweep", "rate=" + ",".join(str(r) for r in range(1, 5001))], ["--sweep"]),
    (SERVE[:2] + ["--sweep", "rate=" + ",".join(str(r) for r in range(1, 101)), "--requests", "1000",
                  "--output-len", "200"], ["output tokens"]),
    (SERVE + ["--disagg", "1000000:1000000"], ["--disagg"]),
    (SERVE + ["--search", "--max-gpus", "64"], ["--max-gpus"]),
    (SERVE[:4] + ["--search", "--max-gpus", "16", "--requests", "1000"], ["output tokens"]),
    (["serve", "llama2-13b", "--rate", "1", "--requests", "5", "--draft", "llama2-7b", "--spec-k", "9007199254740992"],
     ["--spec-k"]),
    (SERVE[:4] + ["--requests", "1", "--output-len", "1000000000", "--kv-blocks", "1000000000"], ["output tokens"]),
    (SERVE[:4] + ["--requests", "100000", "--output-len", "1000"], ["output tokens"]),
    (PLAN + ["--top", "100000"], ["--top"]),
    (PLAN + ["--max-micro-batch", "9007199254740992"], ["--max-micro-batch"]),
    (PLAN[:4] + ["--cluster", "{tmp}/cluster-gpn-1e9.json", "--gpus", "8"], ["gpus_per_node"]),
    (REPORT + ["--top", "9007199254740992"], ["--top"]),
    # learned positions: serving refuses what flops and roofline refuse
    (["serve", "gpt2", "--rate", "1", "--requests", "5", "--prompt-len", "2000"], ["position"]),
    (["serve", "gpt2", "--rate", "1", "--requests", "5", "--prompt-len", "1000", "--output-len", "100"], ["position"]),
    (["serve", "opt-350m", "--trace", "{tmp}/trace-long.csv"], ["position"]),
    # models whose config contradicts itself
    (SERVE[:1] + ["mixtral-8x7b", "--rate", "1", "--requests", "5", "--set", "num_experts_per_tok=9"],
     ["num_experts_per_tok"]),
    (["train", "mixtral-8x7b", "--gpu", "h100", "--set", "num_experts_per_tok=9"], ["num_experts_per_tok"]),
    (["params", "deepseek-v3", "--set", "n_routed_experts=4"], ["num_experts_per_tok"]),
    # calibrate: options
    (["calibrate", str(MODEL_ROWS), "--hold-out", "no-such-model"], ["--hold-out"]),
    (["calibrate", str(MODEL_ROWS), "--base", "{tmp}/cal-peak-above.json"], ["peak_flops"]),
    (["calibrate", str(MODEL_ROWS), "--fit-only", str(NCCL_ROWS)], ["not a benchmark row"]),
    (["calibrate", "{tmp}/empty.jsonl"], ["no rows"]),
    # bench rows / report / comm --from: other families' files
    (["bench", "rows", str(NCCL_ROWS)], ["NCCL rows"]),
    (["bench", "comm", "--from", "--out", str(KERNEL_ROWS)], ["mlsys bench rows"]),
    (["bench", "comm", "--from", "--out", "{tmp}/empty.jsonl"], ["no rows"]),
    (["bench", "comm", "--from", "--out", "{tmp}/no-such.jsonl"], ["no measured rows"]),
    (["bench", "report", "{tmp}/bench-bad-matmul", "--family", "matmul"], ["rows.jsonl line 2"]),
    (["bench", "report", "{tmp}/bench-foreign-comm", "--family", "comm"], ["not NCCL rows"]),
    (["bench", "report", "{tmp}/bench-foreign-memory", "--family", "memory"], ["memory-case"]),
    (["bench", "report", "{tmp}/bench-bad-ceilings", "--family", "matmul"], ["peak_flops"]),
    (["bench", "report", "{tmp}/bench-nan-ceilings", "--family", "matmul"], ["finite"]),
    (["bench", "report", "{tmp}"], ["no <family>/rows.jsonl"]),
]

# ---- files: (name, contents) written into the test's folder ----------------------------------------

TRACE_HEAD = "arrival_s,prompt_len,output_len\n"
BAD_TRACES = {  # name -> (text, words)
    "ragged.csv": (TRACE_HEAD + "0,10,10\n0.5,10,10,7\n", ["line 3", "4 fields"]),
    "short-row.csv": (TRACE_HEAD + "0,10\n", ["line 2", "2 fields"]),
    "big-field.csv": (TRACE_HEAD + "0," + "1" * 140_000 + ",10\n", ["line 2", "field"]),
    "negative-prompt.csv": (TRACE_HEAD + "0,10,10\n1,-5,10\n", ["line 3", "prompt_len"]),
    "zero-output.csv": (TRACE_HEAD + "0,10,0\n", ["line 2", "output_len"]),
    "string-arrival.csv": (TRACE_HEAD + "soon,10,10\n", ["arrival_s"]),
    "nan-arrival.csv": (TRACE_HEAD + "nan,10,10\n", ["arrival_s"]),
    "inf-arrival.csv": (TRACE_HEAD + "inf,10,10\n", ["arrival_s"]),
    "negative-arrival.csv": (TRACE_HEAD + "-1,10,10\n", ["arrival_s"]),
    "fraction-prompt.csv": (TRACE_HEAD + "0,2.5,10\n", ["prompt_len"]),
    "huge-prompt.csv": (TRACE_HEAD + "0,1099511627776,10\n", ["prompt_len"]),
    "missing-column.csv": ("arrival,prompt_len,output_len\n0,10,10\n", ["arrival_s"]),
    "empty-cell.csv": (TRACE_HEAD + "0,,10\n", ["prompt_len"]),
    "header-only.csv": (TRACE_HEAD, ["no data rows"]),
    "empty.csv": ("", ["no header"]),
    "twice.csv": ("arrival_s,prompt_len,prompt_len,output_len\n0,1,1,1\n", ["twice"]),
    "no-name.csv": ("arrival_s,,output_len\n0,1,1\n", ["no name"]),
    "null-line.jsonl": ('{"arrival_s": 0, "prompt_len": 10, "output_len": 10}\nnull\n', ["line 2"]),
    "list-line.jsonl": ("[0, 10, 10]\n", ["line 1"]),
    "string-prompt.jsonl": ('{"arrival_s": 0, "prompt_len": "ten", "output_len": 10}\n', ["prompt_len"]),
    "infinity.jsonl": ('{"arrival_s": Infinity, "prompt_len": 10, "output_len": 10}\n', ["arrival_s"]),
    "truncated.jsonl": ('{"arrival_s": 0, "prompt_len": 10, "output_len": 10}\n{"arrival_s": 1, "pro', ["line 2"]),
    "bool-output.jsonl": ('{"arrival_s": 0, "prompt_len": 10, "output_len": true}\n', ["output_len"]),
}
BAD_LENGTH_COLUMNS = {  # csv:FILE:COLUMN for --prompt-len
    "lengths-zero.csv": ("len\n10\n0\n", ["line 3", "len"]),
    "lengths-text.csv": ("len\n10\nlong\n", ["line 3", "len"]),
    "lengths-ragged.csv": ("len\n10,4\n", ["line 2"]),
}

CLUSTER_JSON = json.loads(CLUSTER.read_text())


def _cluster(**changes) -> dict:
    data = json.loads(json.dumps(CLUSTER_JSON))
    for path, value in changes.items():
        where = data
        *parents, key = path.split("__")
        for p in parents:
            where = where[p]
        if value is _DROP:
            where.pop(key)
        else:
            where[key] = value
    return data


_DROP = object()
BAD_CLUSTERS = {  # name -> (JSON value or raw text, words)
    "cluster-gpn-1e9.json": (_cluster(gpus_per_node=1e9), ["gpus_per_node"]),
    "cluster-gpn-8.9.json": (_cluster(gpus_per_node=8.9), ["gpus_per_node"]),
    "cluster-gpn-true.json": (_cluster(gpus_per_node=True), ["gpus_per_node"]),
    "cluster-gpn-text.json": (_cluster(gpus_per_node="8"), ["gpus_per_node"]),
    "cluster-gpn-0.json": (_cluster(gpus_per_node=0), ["gpus_per_node"]),
    "cluster-no-gpn.json": (_cluster(gpus_per_node=_DROP), ["gpus_per_node"]),
    "cluster-per-collective-list.json": (_cluster(intra_node__per_collective=[1, 2]), ["per_collective"]),
    "cluster-per-collective-entry.json": (_cluster(intra_node__per_collective={"all-reduce": 3}), ["all-reduce"]),
    "cluster-bw-inf.json": ('{"name": "x", "gpus_per_node": 8, "intra_node": {"bandwidth_GBps": Infinity, '
                            '"latency_us": 1}}', ["bandwidth_GBps"]),
    "cluster-bw-zero.json": (_cluster(intra_node__bandwidth_GBps=0), ["bandwidth_GBps"]),
    "cluster-bw-text.json": (_cluster(intra_node__bandwidth_GBps="fast"), ["bandwidth_GBps"]),
    "cluster-latency-negative.json": (_cluster(inter_node__latency_us=-1), ["latency_us"]),
    "cluster-no-intra.json": (_cluster(intra_node=_DROP), ["intra_node"]),
    "cluster-intra-list.json": (_cluster(intra_node=[370, 3.4]), ["intra_node"]),
    "cluster-inter-text.json": (_cluster(inter_node="ib"), ["inter_node"]),
    "cluster-protocols-text.json": (_cluster(intra_node__protocols="LL"), ["protocols"]),
    "cluster-protocol-no-name.json": (_cluster(intra_node__protocols=[{"bandwidth_GBps": 5, "latency_us": 1}]),
                                      ["name"]),
    "cluster-no-name.json": (_cluster(name=_DROP), ["name"]),
    "cluster-aliases-number.json": (_cluster(aliases=[1]), ["aliases"]),
    "cluster-list.json": ([CLUSTER_JSON], ["object"]),
    "cluster-malformed.json": ('{"name": "x",', ["JSON"]),
    "cluster-nan.json": ('{"name": "x", "gpus_per_node": NaN, "intra_node": {}}', ["gpus_per_node"]),
}

CALIBRATION_JSON = json.loads(CALIBRATION.read_text())


def _calibration(section: str | None = None, **changes) -> dict:
    data = json.loads(json.dumps(CALIBRATION_JSON))
    target = data if section is None else data[section]
    target.update(changes)
    return data


BAD_CALIBRATIONS = {
    "cal-peak-above.json": (_calibration("peak_flops", bf16=5 * 989.5e12), ["peak_flops.bf16", "datasheet"]),
    "cal-all-peaks-above.json": ({**CALIBRATION_JSON, "peak_flops": {k: 5 * v for k, v in
                                                                     CALIBRATION_JSON["peak_flops"].items()}},
                                 ["datasheet"]),
    "cal-peak-tiny.json": (_calibration("peak_flops", bf16=1e-300), ["peak_flops.bf16"]),
    "cal-peak-text.json": (_calibration("peak_flops", bf16="fast"), ["peak_flops.bf16"]),
    "cal-peak-negative.json": (_calibration("peak_flops", bf16=-1), ["peak_flops.bf16"]),
    "cal-peak-infinity.json": (json.dumps(CALIBRATION_JSON).replace("989500000000000.0", "Infinity", 1),
                               ["peak_flops"]),
    "cal-peaks-list.json": ({**CALIBRATION_JSON, "peak_flops": [1e15]}, ["peak_flops"]),
    "cal-read-above.json": (_calibration("bandwidth_Bps", read=3e13), ["bandwidth_Bps.read"]),
    "cal-copy-tiny.json": (_calibration("bandwidth_Bps", copy=1.0), ["bandwidth_Bps.copy"]),
    "cal-bandwidth-text.json": ({**CALIBRATION_JSON, "bandwidth_Bps": "fast"}, ["bandwidth_Bps"]),
    "cal-efficiency-above-1.json": (_calibration("efficiency", memory=1.0047), ["efficiency.memory"]),
    "cal-efficiency-text.json": (_calibration("efficiency", matmul="high"), ["efficiency.matmul"]),
    "cal-efficiency-null.json": (_calibration("efficiency", matmul=None), ["efficiency.matmul"]),
    "cal-efficiency-unknown.json": (_calibration("efficiency", tensor=0.5), ["efficiency"]),
    "cal-efficiency-list.json": ({**CALIBRATION_JSON, "efficiency": [0.5]}, ["efficiency"]),
    "cal-sm-count-huge.json": ({**CALIBRATION_JSON, "sm_count": 1e9}, ["sm_count"]),
    "cal-sm-count-fraction.json": ({**CALIBRATION_JSON, "sm_count": 66.5}, ["sm_count"]),
    "cal-launch-negative.json": ({**CALIBRATION_JSON, "launch_overhead_s": -1e-6}, ["launch_overhead_s"]),
    "cal-launch-text.json": ({**CALIBRATION_JSON, "launch_overhead_s": "2us"}, ["launch_overhead_s"]),
    "cal-host-text.json": ({**CALIBRATION_JSON, "host": "fast"}, ["host"]),
    "cal-list.json": ([CALIBRATION_JSON], ["object"]),
    "cal-malformed.json": ('{"gpu": "H100-SXM",', ["JSON"]),
    "cal-latin1.json": (b'{"gpu": "H100 \xe9"}', ["UTF-8"]),
}

MODEL_ROW = json.loads(MODEL_ROWS.read_text().splitlines()[0])
BAD_MODEL_ROWS = {  # name -> (rows text, words); calibrate reads them
    "rows-string-time.jsonl": ({**MODEL_ROW, "median_ms": "7.4"}, ["median_ms"]),
    "rows-infinity-time.jsonl": (json.dumps(MODEL_ROW).replace(f'"median_ms": {MODEL_ROW["median_ms"]}',
                                                               '"median_ms": Infinity'), ["median_ms"]),
    "rows-zero-time.jsonl": ({**MODEL_ROW, "median_ms": 0}, ["median_ms"]),
    "rows-negative-time.jsonl": ({**MODEL_ROW, "median_ms": -3}, ["median_ms"]),
    "rows-truncated.jsonl": (json.dumps(MODEL_ROW)[:500], ["line 1", "JSON"]),
    "rows-null.jsonl": ("null", ["line 1", "null"]),
    "rows-list.jsonl": ("[1, 2]", ["line 1", "list"]),
    "rows-number.jsonl": ("3", ["line 1"]),
    "rows-ops-string.jsonl": ({**MODEL_ROW, "extra_ops": "fast"}, ["extra_ops"]),
    "rows-ops-linears-list.jsonl": ({**MODEL_ROW, "extra_ops": {"linears": [1]}}, ["linears"]),
    "rows-ops-linear-text.jsonl": ({**MODEL_ROW, "extra_ops": {"linears": {"q_proj": "x"}}}, ["q_proj"]),
    "rows-ops-measured-negative.jsonl": ({**MODEL_ROW, "extra_ops": {"linears": {"q_proj": {"measured_s": -1}}}},
                                         ["measured_s"]),
    "rows-phase-number.jsonl": ({**MODEL_ROW, "extra_phase": 3}, ["extra_phase"]),
    "rows-phase-unknown.jsonl": ({**MODEL_ROW, "extra_phase": "serve"}, ["extra_phase"]),
    "rows-batch-zero.jsonl": ({**MODEL_ROW, "extra_batch": 0}, ["extra_batch"]),
    "rows-batch-text.jsonl": ({**MODEL_ROW, "extra_batch": "x"}, ["extra_batch"]),
    "rows-seq-fraction.jsonl": ({**MODEL_ROW, "extra_seq": 2.5}, ["extra_seq"]),
    "rows-layers-negative.jsonl": ({**MODEL_ROW, "extra_layers": -1}, ["extra_layers"]),
    "rows-mode-unknown.jsonl": ({**MODEL_ROW, "extra_mode": "lazy"}, ["extra_mode"]),
    "rows-overrides-text.jsonl": ({**MODEL_ROW, "extra_overrides": "num_hidden_layers=2"}, ["extra_overrides"]),
    "rows-kernel-number.jsonl": ({**MODEL_ROW, "kernel": 7}, ["kernel"]),
    "rows-ok-text.jsonl": ({**MODEL_ROW, "ok": "maybe"}, ["'ok'"]),
    "rows-foreign.jsonl": ({"a": 1}, ["not a benchmark row"]),
    "rows-nccl.jsonl": (NCCL_ROWS.read_text().splitlines()[0], ["NCCL rows"]),
    "rows-latin1.jsonl": (b'{"kernel": "\xe9"}\n', ["UTF-8"]),
    "rows-nan-flops.jsonl": ({**MODEL_ROW, "flops": float("nan")}, ["flops"]),
    "rows-ragged.csv": ("kernel,baseline,shape,dtype,median_ms\nk,b,s,bf16,1,2\n", ["line 2"]),
    "rows-text-time.csv": ("kernel,baseline,shape,dtype,median_ms\nk,b,s,bf16,fast\n", ["median_ms"]),
}

BAD_NCCL_ROWS = {  # bench comm --from --out FILE
    "nccl-size-text.jsonl": ({"size_bytes": "big"}, ["size_bytes"]),
    "nccl-gpus-zero.jsonl": ({"gpus": 0}, ["gpus"]),
    "nccl-collective-unknown.jsonl": ({"collective": "magic"}, ["collective"]),
    "nccl-ok-no-time.jsonl": ({"time_s": None}, ["time_s"]),
    "nccl-time-negative.jsonl": ({"time_s": -1}, ["time_s"]),
    "nccl-busbw-text.jsonl": ({"busbw_GBps": "fast"}, ["busbw_GBps"]),
    "nccl-env-list.jsonl": ({"env": [1]}, ["env"]),
    "nccl-backend-number.jsonl": ({"backend": 1}, ["backend"]),
    "nccl-ok-text.jsonl": ({"ok": "yes"}, ["'ok'"]),
}
NCCL_ROW = json.loads(NCCL_ROWS.read_text().splitlines()[0])


def _write(path: Path, value) -> None:
    if isinstance(value, bytes):
        path.write_bytes(value)
    elif isinstance(value, str):
        path.write_text(value + ("" if value.endswith("\n") or not value else "\n"))
    else:
        path.write_text(json.dumps(value) + "\n")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """Every bad file of the tables above, and the folders the bench report cases read."""
    tmp = tmp_path_factory.mktemp("bad-files")
    (tmp / "trace.csv").write_text(TRACE_HEAD + "0,10,10\n0.5,12,6\n")
    (tmp / "trace-long.csv").write_text(TRACE_HEAD + "0,2000,100\n")
    (tmp / "empty.jsonl").write_text("")
    for table in (BAD_TRACES, BAD_LENGTH_COLUMNS, BAD_CLUSTERS, BAD_CALIBRATIONS, BAD_MODEL_ROWS):
        for name, (value, _) in table.items():
            _write(tmp / name, value)
    for name, (changes, _) in BAD_NCCL_ROWS.items():
        _write(tmp / name, {k: v for k, v in {**NCCL_ROW, **changes}.items() if v is not None})
    bad = tmp / "measured-bad"
    bad.mkdir()
    (bad / "bad.jsonl").write_text(KERNEL_ROWS.read_text().splitlines()[0] + "\n{\n")
    (bad / "nccl.jsonl").write_text(NCCL_ROWS.read_text())  # not rows: skipped, not an error
    folders = {"bench-bad-matmul/matmul/rows.jsonl": KERNEL_ROWS.read_text().splitlines()[0] + "\n[1]\n",
               "bench-foreign-comm/comm/rows.jsonl": KERNEL_ROWS.read_text().splitlines()[0] + "\n",
               "bench-foreign-memory/memory/rows.jsonl": NCCL_ROWS.read_text().splitlines()[0] + "\n",
               "bench-bad-ceilings/matmul/rows.jsonl": KERNEL_ROWS.read_text().splitlines()[0] + "\n",
               "bench-nan-ceilings/matmul/rows.jsonl": KERNEL_ROWS.read_text().splitlines()[0] + "\n"}
    for rel, text in folders.items():
        (tmp / rel).parent.mkdir(parents=True)
        (tmp / rel).write_text(text)
    ceilings = json.loads((ROOT / "reports" / "matmul" / "ceilings.json").read_text())
    (tmp / "bench-bad-ceilings/matmul/ceilings.json").write_text(json.dumps(
        {**ceilings, "peak_flops": {**ceilings["peak_flops"], "bf16": 1e17}}))
    (tmp / "bench-nan-ceilings/matmul/ceilings.json").write_text(json.dumps(ceilings).replace(
        str(ceilings["peak_flops"]["bf16"]), "NaN", 1))
    return tmp


def _fill(args: list[str], tmp: Path, out: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp)).replace("{out}", str(out)) for a in args]


FILE_CASES = (
    [(["serve", "llama2-7b", "--trace", f"{{tmp}}/{name}"], words) for name, (_, words) in BAD_TRACES.items()]
    + [(SERVE + ["--prompt-len", f"csv:{{tmp}}/{name}:len"], words) for name, (_, words) in BAD_LENGTH_COLUMNS.items()]
    + [(prefix + ["--cluster", f"{{tmp}}/{name}"], [name, *words]) for name, (_, words) in BAD_CLUSTERS.items()
       for prefix in (TRAIN[:4], PLAN[:4] + ["--gpus", "8"], SERVE + ["--disagg", "1:1"])]
    + [(prefix + ["--calibration", f"{{tmp}}/{name}"], words) for name, (_, words) in BAD_CALIBRATIONS.items()
       for prefix in (TRAIN, PLAN, SERVE, ["roofline", "llama2-7b"])]
    + [(["calibrate", f"{{tmp}}/{name}"], [name, *words]) for name, (_, words) in BAD_MODEL_ROWS.items()]
    + [(["bench", "rows", f"{{tmp}}/{name}"], [name, *words]) for name, (_, words) in BAD_MODEL_ROWS.items()
       if "foreign" not in name]
    + [(["bench", "comm", "--from", "--out", f"{{tmp}}/{name}"], words) for name, (_, words) in BAD_NCCL_ROWS.items()]
    + [(["bench", "comm", "--from", "--out", f"{{tmp}}/{name}"], words) for name, (_, words) in BAD_MODEL_ROWS.items()
       if name in ("rows-null.jsonl", "rows-list.jsonl", "rows-truncated.jsonl", "rows-number.jsonl", "rows-latin1.jsonl")]
)


OPTION_PARAMS = [(prefix + [option, value], [option]) for prefix, option, values in OPTION_CASES for value in values]
ALL_CASES = OPTION_PARAMS + SPECIAL_CASES + FILE_CASES


def _id(args: list[str]) -> str:
    text = " ".join(args)
    return text if len(text) <= 120 else text[:117] + "..."


@pytest.mark.parametrize("args,words", ALL_CASES, ids=[_id(a) for a, _ in ALL_CASES])
def test_bad_system_invocation(args, words, files, tmp_path):
    check_bad(_fill(args, files, tmp_path / "report"), words, timeout_s=FAST_S)


def test_the_fuzz_is_large_enough():
    assert len(ALL_CASES) >= 300


# ---- the caps at their boundary (small caps patched in, so the largest allowed value runs quickly) ------------

def _ok(args: list[str]) -> dict:
    result = _invoke([*args, "--json"], FAST_S)
    assert result.exit_code == 0, (args, result.stderr, result.exception)
    return json.loads(result.stdout)


def test_request_cap_allows_its_value_and_refuses_one_more(monkeypatch, files):
    from mlsyscalc.calc.serve import limits as serve_limits

    monkeypatch.setattr(serve_limits, "MAX_REQUESTS", 12)
    assert _ok(["serve", "gpt2", "--rate", "1", "--requests", "12"])["requests"] == 12
    check_bad(["serve", "gpt2", "--rate", "1", "--requests", "13"], ["--requests"], FAST_S)
    rows = files / "thirteen.csv"
    rows.write_text(TRACE_HEAD + "".join(f"{i},8,4\n" for i in range(13)))
    check_bad(["serve", "gpt2", "--trace", str(rows)], ["13 rows"], FAST_S)


def test_output_token_cap_counts_every_simulation(monkeypatch):
    from mlsyscalc.calc.serve import limits as serve_limits

    monkeypatch.setattr(serve_limits, "MAX_OUTPUT_TOKENS", 3 * 10 * 8)
    sweep = ["serve", "gpt2", "--requests", "10", "--output-len", "8", "--prompt-len", "16"]
    assert len(_ok([*sweep, "--sweep", "rate=1,2,4"])["sweep"]) == 3  # 3 x 10 x 8 tokens: at the cap
    check_bad([*sweep, "--sweep", "rate=1,2,4,8"], ["output tokens"], FAST_S)
    check_bad([*sweep[:4], "--output-len", "25", "--rate", "1"], ["output tokens"], FAST_S)


def test_sweep_cap(monkeypatch):
    from mlsyscalc.calc.serve import limits as serve_limits

    monkeypatch.setattr(serve_limits, "MAX_SIMULATIONS", 2)
    assert len(_ok(["serve", "gpt2", "--requests", "5", "--sweep", "rate=1,2"])["sweep"]) == 2
    check_bad(["serve", "gpt2", "--requests", "5", "--sweep", "rate=1,2,3"], ["--sweep"], FAST_S)


def test_disagg_and_search_caps(monkeypatch):
    from mlsyscalc.calc.serve import disagg as serve_disagg

    monkeypatch.setattr(serve_disagg, "MAX_INSTANCES", 3)
    base = ["serve", "gpt2", "--rate", "4", "--requests", "8", "--prompt-len", "32", "--output-len", "4"]
    assert _ok([*base, "--disagg", "3:3"])["decode_instances"] == 3
    check_bad([*base, "--disagg", "4:1"], ["--disagg"], FAST_S)
    monkeypatch.setattr(serve_disagg, "MAX_SEARCH_GPUS", 3)
    assert _ok([*base, "--search", "--max-gpus", "3"])["max_gpus"] == 3
    check_bad([*base, "--search", "--max-gpus", "4"], ["--max-gpus"], FAST_S)


def test_spec_k_cap(monkeypatch):
    from mlsyscalc.calc.serve import spec as serve_spec

    monkeypatch.setattr(serve_spec, "MAX_SPEC_K", 6)
    args = ["serve", "llama2-13b", "--rate", "1", "--requests", "5", "--output-len", "16", "--draft", "llama2-7b"]
    assert _ok([*args, "--spec-k", "6"])["speculative"]["spec_k"] == 6
    check_bad([*args, "--spec-k", "7"], ["--spec-k"], FAST_S)


def test_plan_caps(monkeypatch):
    from mlsyscalc.calc.plan import space as plan_space

    monkeypatch.setattr(plan_space, "MAX_TOP", 2)
    monkeypatch.setattr(plan_space, "MAX_MICRO_BATCH", 2)
    args = ["plan", "gpt2", "--gpu", "h100", "--gpus", "2", "--seq", "1024", "--global-batch", "4", "--fix",
            "recompute=none"]
    assert len(_ok([*args, "--top", "2", "--max-micro-batch", "2"])["candidates"]) == 2
    check_bad([*args, "--top", "3"], ["--top"], FAST_S)
    check_bad([*args, "--top", "2", "--max-micro-batch", "3"], ["--max-micro-batch"], FAST_S)


def test_gpus_per_node_cap(monkeypatch, tmp_path):
    from mlsyscalc.specs import cluster

    monkeypatch.setattr(cluster, "MAX_GPUS_PER_NODE", 16)
    for gpus, ok in ((16, True), (17, False)):
        path = tmp_path / f"node{gpus}.json"
        path.write_text(json.dumps(_cluster(gpus_per_node=gpus, name=f"node{gpus}", aliases=[])))
        args = ["plan", "gpt2", "--cluster", str(path), "--gpus", "16", "--seq", "1024", "--global-batch", "16", "--top",
                "1"]
        if ok:
            assert _ok(args)["candidates"]
        else:
            check_bad(args, ["gpus_per_node"], FAST_S)


def test_every_cap_is_listed_in_docs_cli():
    """docs/cli.md names each cap with its value (the table users read)."""
    from mlsyscalc.calc.plan import space as plan_space
    from mlsyscalc.calc.serve import capacity as serve_capacity
    from mlsyscalc.calc.serve import limits as serve_limits
    from mlsyscalc.calc.serve import min_gpus as serve_min_gpus
    from mlsyscalc.readers import files, measured, trace
    from mlsyscalc.specs import cluster

    text = (ROOT / "docs" / "cli.md").read_text()
    caps = {"--requests": serve_limits.MAX_REQUESTS, "output tokens": serve_limits.MAX_OUTPUT_TOKENS,
            "--sweep": serve_limits.MAX_SIMULATIONS, "--spec-k": serve_limits.MAX_SPEC_K,
            "--disagg": serve_limits.MAX_INSTANCES, "--max-gpus": serve_limits.MAX_SEARCH_GPUS,
            "--max-rate": serve_capacity.MAX_SIMULATIONS, "--min-gpus --max-gpus": serve_min_gpus.MAX_BUDGET_GPUS,
            "--top": plan_space.MAX_TOP, "--max-micro-batch": plan_space.MAX_MICRO_BATCH,
            "gpus_per_node": cluster.MAX_GPUS_PER_NODE, "input file": files.MAX_FILE_BYTES,
            "CSV field": files.MAX_CSV_FIELD_CHARS, "--measured": measured.MAX_FILES,
            "trace lengths": trace.MAX_REQUEST_TOKENS}
    table = text[text.index("## Caps on loops"):]
    for name, value in caps.items():
        row = next((line for line in table.splitlines() if line.startswith("|") and name in line), None)
        assert row is not None, f"docs/cli.md: no row for {name}"
        assert f"{value:,}" in row, f"docs/cli.md: the {name} row does not say {value:,}"
