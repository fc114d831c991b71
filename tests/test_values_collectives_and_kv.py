"""Value tests for what a random sample of planted bugs showed no test looked at.

Each test pins a documented output against hand arithmetic written out here (from the model's
config.json in model_specs/, the cluster spec's figures, or transformers' parameter counts in
tests/data/hf_params.json), never against the code under test. docs/mutation.md lists the
mutants that led to each.
"""

from __future__ import annotations

import pytest

from mlsyscalc.calc.roofline.calibration import match_gpu
from mlsyscalc.calc.comm.collectives import collective_cost
from mlsyscalc.errors import MlsysError
from mlsyscalc.specs.gpu import AmbiguousGPU, load_gpu

from .conftest import load_data

HF = load_data("hf_params.json")["models"]  # transformers counts, meta device

# hgx-h100: NVLink 370 GB/s achievable for all-reduce, 3.4 us a step; one 50 GB/s NIC a GPU, 14 us


def test_flat_ring_over_two_nodes_runs_on_the_rails():
    # 4 GPUs on 2 nodes, 2 a node: NCCL runs one ring per NIC, so the ring's bandwidth is
    # min(NVLink 370, 2 NICs x 50) = 100 GB/s and each step waits for the NIC's 14 us.
    # all-reduce of 1 GiB: 2(p-1) = 6 steps, 2(p-1)/p = 1.5 x n bytes
    n = 2**30
    cost = collective_cost("all-reduce", n, 4, "hgx-h100", nodes=2)
    (phase,) = cost.phases
    assert phase.link == "intra+inter (rails)" and phase.steps == 6
    assert cost.time_s == pytest.approx(6 * 14e-6 + 1.5 * n / 100e9, rel=1e-12)


def test_flat_ring_of_one_gpu_a_node_is_the_network_alone():
    # 2 GPUs on 2 nodes: the ring is the NIC link only: 2 steps of 14 us, n bytes at 50 GB/s
    n = 2**30
    cost = collective_cost("all-reduce", n, 2, "hgx-h100", nodes=2)
    (phase,) = cost.phases
    assert phase.link.startswith("8x ConnectX-7") and phase.steps == 2
    assert cost.time_s == pytest.approx(2 * 14e-6 + n / 50e9, rel=1e-12)


@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "gpt2"])
def test_tied_head_adds_no_weight_bytes(run_cli, model):
    # a tied lm_head reads the embedding table: bf16 weights are 2 bytes x transformers' count
    d = run_cli.json("memory", "infer", model)
    assert HF[model]["tied_embeddings"] and HF[model]["lm_head_params"] == 0
    assert d["weights_bytes"] == 2 * HF[model]["total_params"]


@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "gpt2"])
def test_tied_head_trains_no_weights_of_its_own(run_cli, model):
    # training in bf16 with AdamW: 2 B weights and 2 B gradients per parameter, the tied head
    # counted once in the embedding (transformers' count)
    d = run_cli.json("memory", "train", model)
    assert d["weights_bytes"] == d["gradients_bytes"] == 2 * HF[model]["total_params"]


def test_group_size_bound_at_tp_8_through_the_api():
    from mlsyscalc.calc.memory.inference import InferOptions
    from mlsyscalc.specs.lookup import load_model

    # deepseek-v3 under tp 8: the routed experts' down_proj (2048 inputs, row-parallel) split to
    # 256 columns a rank is narrower than kv_b_proj's whole 512 (column-parallel, never split)
    spec = load_model("deepseek-v3")
    InferOptions(dtype="int4", group_size=256, tp=8).validate(spec)
    with pytest.raises(MlsysError, match=r"\(256 columns per rank\)"):
        InferOptions(dtype="int4", group_size=512, tp=8).validate(spec)


def test_group_size_is_bounded_by_whole_column_parallel_inputs(run_cli):
    # deepseek-v3 under --tp 2: kv_b_proj is column-parallel, so each rank keeps its whole input
    # of kv_lora_rank = 512 columns; row-parallel o_proj (128 heads x 128 = 16384 in) and the
    # experts' down_proj (2048 in) are split to 8192 and 1024. Narrowest: 512.
    assert run_cli.json("memory", "infer", "deepseek-v3", "--dtype", "int4", "--group-size", "512",
                        "--tp", "2")["dtype"] == "int4"
    code, _, err = run_cli("memory", "infer", "deepseek-v3", "--dtype", "int4", "--group-size", "1024",
                           "--tp", "2")
    assert code == 2 and "narrowest weight input (512 columns per rank)" in err
    # llama2-7b under --tp 2: o_proj's 4096 inputs split to 2048, q/k/v/gate/up keep 4096
    code, _, err = run_cli("memory", "infer", "llama2-7b", "--dtype", "int4", "--group-size", "4096", "--tp", "2")
    assert code == 2 and "(2048 columns per rank)" in err


# --- second oracles for kills that rested on one test ---------------------------------------------

def test_reserve_of_a_quarter_of_an_a100_40gb(run_cli):
    # A100-40GB-SXM: 40960 MiB as the driver reports it; 25% of it is 10 GiB kept back
    d = run_cli.json("memory", "train", "gpt2", "--gpu", "A100-40GB-SXM", "--reserve", "25%")
    cap = 40960 * 2**20
    assert d["capacity_bytes"] == cap and d["reserve_bytes"] == 10 * 2**30
    assert d["usable_bytes"] == 30 * 2**30


@pytest.mark.parametrize("args,workspace,logits", [
    # gpt2 (h 768, MHA, plain 4h MLP I = 3072, vocab 50257), 512-token prefill chunk, bf16:
    # 512 x (2h + max(q + k + v + attn_out = 4h, 2I)) = 512 x (1536 + 6144) elements x 2 bytes;
    # the last token's logits in fp32: 50257 x 4
    (["gpt2", "--context", "1024", "--prefill-chunk", "512"], 512 * (1536 + 6144) * 2, 50257 * 4),
    # --tp 2 halves the attention widths and the MLP (2I / 2 = 3072 > 4h / 2); the vocab splits
    # to ceil(50257 / 2) = 25129
    (["gpt2", "--context", "1024", "--prefill-chunk", "512", "--tp", "2"], 512 * (1536 + 3072) * 2, 25129 * 4),
    # llama2-7b (h 4096, gated MLP I = 11008), 2048-token chunk: 3I = 33024 > 4h = 16384
    (["llama2-7b"], 2048 * (8192 + 33024) * 2, 32000 * 4),
])
def test_inference_workspace_is_the_wider_of_attention_and_mlp(run_cli, args, workspace, logits):
    d = run_cli.json("memory", "infer", *args)
    assert d["detail"]["activations_workspace_bytes"] == workspace
    assert d["detail"]["activations_logits_bytes"] == logits


def test_fp32_adamw_on_gpt2_by_hand(run_cli):
    # fp32 training has no master copy: 4 B weights + 4 B gradients + 2 x 4 B AdamW states per
    # parameter (transformers: 124,439,808 parameters)
    p = HF["gpt2"]["total_params"]
    d = run_cli.json("memory", "train", "gpt2", "--dtype", "fp32")
    assert (d["weights_bytes"], d["gradients_bytes"]) == (4 * p, 4 * p)
    assert d["detail"]["master_weights_bytes"] == 0 and d["detail"]["optimizer_states_bytes"] == 8 * p


def test_llama2_activations_per_stage_count_micro_batches_in_flight(run_cli):
    # llama2-7b, SwiGLU with flash: a layer saves 2 bytes x s x (8h + 4I) = 2 x 2048 x 76,800
    # (docs/memory.md; Korthikanti et al. 2022 without the attention scores)
    layer = 2 * 2048 * (8 * 4096 + 4 * 11008)
    d = run_cli.json("memory", "train", "llama2-7b")
    assert d["detail"]["activations_layers_bytes"] == 32 * layer
    # --pp 2 --grad-accum 4 (1F1B): stage 0 holds min(2 - 0, 4) = 2 micro-batches of its 16
    # layers, stage 1 one micro-batch plus the final norm and lm_head inputs (2 x h x s x 2 B)
    stages = run_cli.json("memory", "train", "llama2-7b", "--pp", "2", "--grad-accum", "4")["stages"]
    assert [s["micro_batches_in_flight"] for s in stages] == [2, 1]
    assert stages[0]["breakdown"]["activations_bytes"] == 2 * 16 * layer
    assert stages[1]["breakdown"]["activations_bytes"] == 16 * layer + 2 * 4096 * 2048 * 2


# --- GPU names -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device,name", [
    # 'a100-80gb-pcie' is no name: one word dropped, 'a100-80gb' is an alias of the 80 GB card
    # (two dropped, 'a100' would be the start of both A100s)
    ("NVIDIA A100 80GB PCIe", "A100-80GB-SXM"),
    ("NVIDIA A100 40GB SXM4", "A100-40GB-SXM"),
])
def test_device_names_drop_one_trailing_word_at_a_time(device, name):
    assert match_gpu(device).name == name


def test_a_family_name_resolves_by_the_one_rule():
    # 'RTX' is the family of RTX-4090 alone; 'A100' of the 40 GB and the 80 GB SXM cards: the larger wins, and
    # the resolution is announced (a NameResolved warning, printed once by the CLI); a non-prefix stays unknown
    with pytest.warns(UserWarning, match="RTX -> RTX-4090"):
        assert load_gpu("RTX").name == "RTX-4090"
    with pytest.warns(UserWarning, match="A100 -> A100-80GB-SXM"):
        assert load_gpu("A100").name == "A100-80GB-SXM"
    with pytest.raises(MlsysError, match="unknown GPU 'RTX40'") as info:
        load_gpu("RTX40")
    assert not isinstance(info.value, AmbiguousGPU)


# --- roofline: tensor-parallel collectives ---------------------------------------------------------

def test_roofline_tp_collectives_carry_activations_and_logits(run_cli):
    # llama3-8b prefill of 1024 tokens under --tp 2, bf16 (h 4096, 32 layers, vocab 128256):
    # two all-reduces of 1024 x 4096 x 2 B a layer (attention and MLP outputs) and one after the
    # embedding; the logits all-gather carries 1024 x 128256 x 2 B
    d = run_cli.json("roofline", "model", "llama3-8b", "--tp", "2", "--seq", "1024")
    rows = {r["name"]: r for r in d["comm"]}
    assert rows["layer all-reduce"]["size_bytes"] == 1024 * 4096 * 2 and rows["layer all-reduce"]["count"] == 64
    assert rows["embedding all-reduce"]["size_bytes"] == 1024 * 4096 * 2
    assert rows["logits all-gather"]["size_bytes"] == 1024 * 128256 * 2
    assert rows["logits all-gather"]["count"] == 1


def test_softmax_and_norm_ops_count_by_the_documented_rule():
    # roofline_memory's rule: one read and one write of (rows, cols) bf16, 5 FLOPs a softmax
    # element; a norm reads x and its weight row, 4 FLOPs an element; an embedding gathers its
    # tokens' rows (and learned positions) and computes nothing
    from mlsyscalc.calc.roofline.memory_bound import embedding_op, norm_op, softmax_op

    op = softmax_op(96, 1000)
    assert (op.read_bytes, op.write_bytes, op.flops) == (96 * 1000 * 2, 96 * 1000 * 2, 5 * 96 * 1000)
    op = norm_op(96, 1000)
    assert (op.read_bytes, op.write_bytes, op.flops) == (97 * 1000 * 2, 96 * 1000 * 2, 4 * 96 * 1000)
    op = embedding_op(96, 1000, extra_width=1000)
    assert (op.read_bytes, op.write_bytes, op.flops) == (96 * 2000 * 2, 96 * 1000 * 2, 0)


@pytest.mark.parametrize("args,params", [
    ([], 124439808),  # gpt2, transformers' count
    (["--dp", "2", "--zero", "1"], 124439808 // 2),  # ZeRO-1: each rank steps half the parameters
])
def test_adamw_step_bytes_per_parameter(run_cli, args, params):
    # AdamW on gpt2 trained in bf16: reads fp32 master, gradient, m, v (16 B a parameter), writes
    # master, m, v (12 B) and the bf16 weight copy (2 B); 12 FLOPs a parameter
    d = run_cli.json("roofline", "model", "gpt2", "--phase", "train", "--seq", "1024", *args)
    (adamw,) = [o for o in d["ops"] if o["name"] == "adamw"]
    assert (adamw["read_bytes"], adamw["write_bytes"], adamw["flops"]) == (16 * params, 14 * params, 12 * params)


def test_data_parallel_note_only_with_more_than_one_replica(run_cli):
    one = run_cli.json("roofline", "model", "gpt2", "--phase", "train", "--seq", "1024")
    two = run_cli.json("roofline", "model", "gpt2", "--phase", "train", "--seq", "1024", "--dp", "2")
    assert not [n for n in one["notes"] if "data parallel" in n]
    assert [n for n in two["notes"] if n.startswith("data parallel x2, ZeRO-0")]


# --- serving: the out-of-memory message -------------------------------------------------------------

@pytest.mark.parametrize("scheduler,tokens,workspace_gb", [
    # llama3-70b (h 8192, 8 KV heads of 128, I 28672, vocab 128256) on one H100-SXM: weights
    # 2 B x 70,553,706,496 = 141.1 GB; the workspace is one iteration's tokens x (2h + max(q + 2 kv
    # + o = 18432, 3I = 86016)) x 2 B plus fp32 logits for 256 sequences (256 x 128256 x 4 B):
    # vllm, 8192 tokens: 1.678 GB + 0.131 GB = 1.8 GB; sarathi, 512-token chunks: 0.105 + 0.131 = 0.2 GB
    ("vllm", 8192, "1.8"),
    ("sarathi", 512, "0.2"),
])
def test_serve_names_what_leaves_no_room_for_a_kv_cache(run_cli, scheduler, tokens, workspace_gb):
    assert round((tokens * (2 * 8192 + 3 * 28672) * 2 + 256 * 128256 * 4) / 1e9, 1) == float(workspace_gb)
    code, _, err = run_cli("serve", "llama3-70b", "--rate", "1", "--requests", "5", "--scheduler", scheduler)
    usable = 0.9 * 81559 * 2**20  # --gpu-memory-utilization 0.9 of the card's 81559 MiB
    assert code == 2
    assert f"weights {2 * HF['llama3-70b']['total_params'] / 1e9:.1f} GB + workspace {workspace_gb} GB " \
           f"of {usable / 1e9:.1f} GB usable" in err


# --- scaling laws -------------------------------------------------------------------------------------

def test_paper_table_compares_approaches_2_and_3_with_their_own_tables():
    from mlsyscalc.calc.scaling.calculators import paper_table

    # every law is evaluated at Chinchilla Table 3's 9 budgets; approaches 2 and 3 also at the 9
    # budgets of their own Table A3; approach 1's own table is Table 3 (not repeated), the other
    # laws have none
    for law, own in (("approach1", ""), ("approach2", "Table A3 (approach 2)"),
                     ("approach3", "Table A3 (approach 3)"), ("epoch", ""), ("tpp20", "")):
        table = paper_table(law)
        assert len(table.rows) == 9 and {r.reference for r in table.rows} == {"Table 3"}
        assert {r.reference for r in table.own_rows} == ({own} if own else set())
        assert len(table.own_rows) == (9 if own else 0)
    # approach 2's first Table A3 row: 1.84e19 FLOPs -> 400M parameters, 7.7B tokens (printed)
    first = paper_table("approach2").own_rows[0]
    assert (first.compute_flops, first.paper_params, first.paper_tokens) == (1.84e19, 400e6, 7.7e9)


@pytest.mark.parametrize("delta", [0.0, -1e-3])
def test_huber_delta_must_be_positive(delta):
    from mlsyscalc.calc.scaling.fit import FitOptions, Runs, fit_runs

    # a valid 3 x 3 grid (losses from a Chinchilla-like law), so only delta is wrong
    runs = Runs(tuple(n for n in (1e8, 1e9, 1e10) for _ in range(3)), (2e9, 2e10, 2e11) * 3,
                tuple(1.7 + 400 / n**0.34 + 410 / d**0.28 for n in (1e8, 1e9, 1e10) for d in (2e9, 2e10, 2e11)))
    with pytest.raises(MlsysError, match="Huber delta must be positive"):
        fit_runs(runs, FitOptions(delta=delta, bootstrap=0))


def test_a_request_that_fills_the_kv_cache_exactly_is_admitted(run_cli):
    # 511 prompt + 1 output tokens = 512 = exactly 32 blocks of 16: an idle engine admits it
    # (the preemption watermark is kept back only while others run); one token less of cache
    # and it never fits
    d = run_cli.json("serve", "llama3-8b", "--rate", "1", "--requests", "2", "--prompt-len", "511",
                     "--output-len", "1", "--kv-blocks", "32")
    assert d["requests"] == 2 and d["kv_blocks"] == 32
    code, _, err = run_cli("serve", "llama3-8b", "--rate", "1", "--requests", "2", "--prompt-len", "511",
                           "--output-len", "1", "--kv-blocks", "31")
    assert code == 2 and "needs 32 KV blocks; the GPU holds 31" in err


def test_series_buckets_preemptions_by_time():
    from mlsyscalc.calc.serve.engine import Trace
    from mlsyscalc.calc.serve.metrics import series

    # 10 iterations ending at 1..10 s in 5 buckets of 2 s; preemptions at 2.5 s (bucket 1) and
    # 9.9 s (bucket 4); 4 of 8 blocks used throughout, 100 tokens an iteration
    trace = Trace([], [], [], [float(t) for t in range(1, 11)], [4] * 10, [100] * 10, [1] * 10, [2.5, 9.9], 10.0)
    rows = series(trace, total_blocks=8, points=5)
    assert [r["t_s"] for r in rows] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert [r["preemptions"] for r in rows] == [0, 1, 0, 0, 1]
    # iteration ends 1 | 2, 3 | 4, 5 | 6, 7 | 8, 9 | 10 -> int(t / 2) = 0, 1, 1, 2, 2, 3, 3, 4, 4, 5 -> 4
    assert [r["iterations"] for r in rows] == [1, 2, 2, 2, 3]
    assert all(r["kv_utilization"] == 0.5 and r["batch_tokens_mean"] == 100 for r in rows)


def test_static_batching_counts_arrivals_one_by_one():
    from mlsyscalc.calc.serve.static import _arrived

    # requests (arrival_s, prompt, output) sorted by arrival; by 0.01 s the first two have arrived,
    # the one at 500 s has not (however many arrived before `start`)
    req = [(0.0, 128, 4), (0.001, 128, 4), (500.0, 128, 4), (1000.0, 128, 4)]
    assert [_arrived(req, start, 0.01) for start in (0, 1, 2)] == [2, 2, 2]
    assert _arrived(req, 1, 500.0) == 3 and _arrived(req, 0, 2000.0) == 4


@pytest.mark.parametrize("text,mean", [
    ("512", 512), ("uniform:100,300", 200), ("normal:400,50", 400),
    # lognormal(mu, sigma) has mean exp(mu + sigma^2 / 2): exp(6 + 0.125) = 457.14...
    ("lognormal:6,0.5", 457.1447),
])
def test_length_distribution_means(text, mean):
    from mlsyscalc.calc.serve.workload import parse_length

    assert parse_length(text, "--prompt-len").mean == pytest.approx(mean, rel=1e-6)
    assert parse_length("", "--prompt-len", values=(1, 2, 6)).mean == 3


def test_workload_duration_is_the_last_arrival():
    from mlsyscalc.calc.serve.workload import Workload

    w = Workload(((0.0, 10, 1), (1.0, 10, 1), (5.0, 10, 1)), "three requests")
    assert w.duration_s == 5.0


def test_serving_reads_the_attention_compute_rate_at_a_4096_token_prefill():
    # docs/serving.md: compute-bound attention rows take their seconds per FLOP from a 4096-token
    # prefill (the roofline's tile and wave quantisation averaged over a long prompt)
    from mlsyscalc.calc.roofline.model import predict_model
    from mlsyscalc.calc.roofline.ops import resolve_ceilings
    from mlsyscalc.calc.roofline.options import RooflineOptions
    from mlsyscalc.calc.serve.iteration import IterationCost
    from mlsyscalc.specs.lookup import load_model

    spec, ceil = load_model("llama3-8b"), resolve_ceilings("H100-SXM")
    cost = IterationCost(spec, ceil, RooflineOptions())
    long = predict_model(spec, ceil, RooflineOptions(phase="prefill", batch=1, seq=4096, check_fit=False, window="full"))
    (attn,) = [r.pred for r in long.rows if r.pred.kind == "attention"]
    (row,) = cost.prefill_rows
    # (~1.7e-15 s a FLOP: approx needs abs=0, its default absolute tolerance is 1e-12)
    assert row.seconds_per_flop == pytest.approx(attn.compute_s / attn.flops, rel=1e-9, abs=0)


def test_slowest_pipeline_stage_is_the_one_with_most_kernel_time():
    from mlsyscalc.calc.train.parts import Stage, StageParts, slowest_stage

    # a dense layer: 1 s forward, 2 s backward, of which 0.5 s forward + 1 s backward attention;
    # embedding 0.1 + 0.1 s, final norm + lm_head 1.5 + 3 s.
    # stage 0: 3 layers + embedding: forward 3.1, backward 6.1 (9.2 in all), attention 4.5
    # stage 1: 2 layers + head:      forward 3.5, backward 7.0 (10.5 in all), attention 3.0
    # stage 1 has the most kernel time; by forward + attention stage 0 would look slower (7.6 > 6.5)
    parts = StageParts({"dense": {"forward": 1.0, "backward": 2.0}}, {"dense": {"forward": 0.5, "backward": 1.0}},
                       {"forward": 0.1, "backward": 0.1}, {"forward": 1.5, "backward": 3.0})
    stages = (Stage(0, (0, 1, 2), 3, 0, True, False), Stage(1, (3, 4), 2, 0, False, True))
    assert slowest_stage(parts, stages, "none") == pytest.approx((3.5, 7.0, 3.0))


@pytest.mark.parametrize("recompute,tp_s,cp_s", [
    ("none", 3.0, 6.0),
    # docs/train.md: the recomputed forward repeats TP's forward all-reduces (forward + backward
    # traffic x 1.5) and CP's forward K,V all-gather (x 4/3)
    ("full", 4.5, 8.0),
    ("selective", 3.0, 6.0),
])
def test_full_recomputation_repeats_tp_and_cp_traffic(recompute, tp_s, cp_s):
    from mlsyscalc.calc.comm.exposed import Windows, dim_times

    seconds = {("tp", "model"): 3.0, ("cp", "model"): 6.0, ("pp", "model"): 1.0, ("dp", "grad"): 2.0}
    # 4 micro-batches of 1 s forward + 2 s backward (12 s of kernels), 0.5 s of attention each:
    # nothing overlapped, every second is exposed
    total, exposed = dim_times(seconds, zero=0, recompute=recompute, overlap=(),
                               windows=Windows(1.0, 2.0, 0.5, 4))
    assert total == exposed == {"tp": tp_s, "cp": cp_s, "dp": 2.0, "pp": 1.0, "ep": 0.0}
    # overlapping cp hides it behind the 4 x 0.5 s attention kernels, tp behind the 12 s of kernels but for the
    # 22% chunked overlap leaves exposed (train_comm.TP_OVERLAP_EXPOSED)
    _, hidden = dim_times(seconds, zero=0, recompute=recompute, overlap=("tp", "cp"),
                          windows=Windows(1.0, 2.0, 0.5, 4))
    assert hidden["cp"] == cp_s - 2.0 and hidden["tp"] == pytest.approx(0.22 * tp_s)


# --- second oracles for the check sample's single-test kills (collectives and comm step) ------------

def test_hierarchical_broadcast_and_reduce_on_two_nodes():
    # broadcast: the root's node sends n across the 2 nodes (1 step of 14 us, n at 50 GB/s), then
    # each node pipelines n over its 8 GPUs (7 steps of 3.4 us, n at 370 GB/s); reduce mirrors it
    n = 2**30
    inter, intra = 14e-6 + n / 50e9, 7 * 3.4e-6 + n / 370e9
    cost = collective_cost("broadcast", n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    assert [p.name for p in cost.phases] == ["inter-node broadcast", "intra-node broadcast"]
    assert cost.time_s == pytest.approx(inter + intra, rel=1e-12)
    cost = collective_cost("reduce", n, 16, "hgx-h100", nodes=2, algo="hierarchical")
    assert [p.name for p in cost.phases] == ["intra-node reduce", "inter-node reduce"]
    assert cost.time_s == pytest.approx(intra + inter, rel=1e-12)


def test_sequence_parallel_collectives_per_micro_batch(run_cli):
    # llama3-8b --tp 8 --sp --grad-accum 4: per layer 2 all-gathers forward and 2 backward (and as
    # many reduce-scatters) of the 2048 x 4096 bf16 activations, 32 layers, 4 micro-batches;
    # a ring all-gather moves 7/8 of each message per GPU
    d = run_cli.json("comm", "step", "llama3-8b", "--tp", "8", "--sp", "--grad-accum", "4")
    rows = {r["collective"]: r for r in d["rows"] if r["dim"] == "tp"}
    for collective in ("all-gather", "reduce-scatter"):
        assert rows[collective]["message_bytes"] == 2048 * 4096 * 2
        assert rows[collective]["calls"] == 2 * 2 * 32 * 4
    assert rows["all-gather"]["bytes_per_gpu"] == 512 * 7 / 8 * 2048 * 4096 * 2


@pytest.mark.parametrize("args,message,calls", [
    # mixtral-8x7b (top-2 of 8, h 4096, 32 MoE layers), --dp 8 --ep 8: each GPU dispatches its 2048
    # tokens x 2 experts x 4096 x 2 B; dispatch + combine, forward and backward: 4 a layer, x 2
    # micro-batches
    (["--dp", "8", "--ep", "8", "--grad-accum", "2"], 2048 * 2 * 4096 * 2, 4 * 32 * 2),
    # with --tp 2 --sp each TP rank routes its half of the sequence (then the etp = tp = 2 pair gathers it)
    (["--dp", "8", "--ep", "8", "--tp", "2", "--sp"], 1024 * 2 * 4096 * 2, 4 * 32),
])
def test_expert_parallel_all_to_all_carries_top_k_copies(run_cli, args, message, calls):
    d = run_cli.json("comm", "step", "mixtral-8x7b", *args)
    (row,) = [r for r in d["rows"] if r["dim"] == "ep" and r["collective"] == "all-to-all"]
    assert (row["collective"], row["message_bytes"], row["calls"]) == ("all-to-all", message, calls)
