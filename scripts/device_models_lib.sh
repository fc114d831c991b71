# Shared by the scripts/device_models_*.sh calls (source it first): one `mlsys bench model` case, skipped
# once the call's budget is spent, its table appended to DIR/log.md and its rows to OUT; the start and end
# of a call; model shapes set on a built-in spec that more than one call measures.
#   models_call DEFAULT_DIR DEFAULT_BUDGET_S [DIR]   sets DIR and BUDGET_S, makes DIR, logs the card
#   bench_case OUT LIMIT_S ARGS...
#   models_done
models_call() {
  DIR=${3:-$1}
  BUDGET_S=${BUDGET_S:-$2}
  mkdir -p "$DIR"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DIR/log.md" 2>&1
}
bench_case() {
  local out=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): $*" >>"$DIR/log.md"; return; fi
  echo "## mlsys bench model $*  (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout "$limit" python3 -W ignore -m mlsyscalc bench model --quiet --reps 6 --out "$out" --format markdown "$@" \
    >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"
}
models_done() { echo "done t=${SECONDS}s" >>"$DIR/log.md"; }
# DeepSeek-V2-Lite's shape (deepseek-ai/DeepSeek-V2-Lite config.json: hidden 2048, 27 layers, 16 heads, no query
# compression, latent 512 + rope 64, 64 experts of 1408, top 6, 2 shared, first layer dense, vocabulary 102400;
# 15.7 B parameters) on the deepseek-v3 spec
V2LITE=(deepseek-v3 --set hidden_size=2048 --set num_attention_heads=16 --set num_key_value_heads=16
        --set q_lora_rank=null --set n_routed_experts=64 --set num_experts_per_tok=6 --set moe_intermediate_size=1408
        --set n_shared_experts=2 --set first_k_dense_replace=1 --set intermediate_size=10944 --set vocab_size=102400
        --set num_hidden_layers=27)
# OLMoE-1B-7B's shape (allenai/OLMoE-1B-7B-0924 config.json: hidden 2048, 16 layers, 16 heads, 64 experts of 1024,
# top 8, vocabulary 50304; its q/k norms left out) on the mixtral-8x7b spec
OLMOE=(mixtral-8x7b --set hidden_size=2048 --set num_attention_heads=16 --set num_key_value_heads=16
       --set intermediate_size=1024 --set num_local_experts=64 --set num_experts_per_tok=8 --set num_hidden_layers=16
       --set vocab_size=50304)
