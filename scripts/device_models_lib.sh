# Shared by scripts/device_models_fresh.sh and device_models_holdout.sh (source it after setting DIR and
# BUDGET_S): one `mlsys bench model` case, skipped once the call's budget is spent, its table appended to
# DIR/log.md and its rows to OUT.
#   bench_case OUT LIMIT_S ARGS...
bench_case() {
  local out=$1 limit=$2; shift 2
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): $*" >>"$DIR/log.md"; return; fi
  echo "## mlsys bench model $*  (t=${SECONDS}s)" >>"$DIR/log.md"
  timeout "$limit" python3 -W ignore -m mlsyscalc bench model --quiet --reps 6 --out "$out" --format markdown "$@" \
    >>"$DIR/log.md" 2>&1 || echo "exit $?" >>"$DIR/log.md"
}
