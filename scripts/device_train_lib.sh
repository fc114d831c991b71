# Sourced by scripts/device_train*.sh: run one step of a device sweep under a timeout, logging to $LOG, and start
# nothing once $SECONDS passes $BUDGET_S (both set by the caller).
step() {  # TIMEOUT_S COMMAND...
  if [ "$SECONDS" -gt "$BUDGET_S" ]; then echo "## skipped (time): ${*:2}" >>"$LOG"; return; fi
  echo "## ${*:2}  (t=${SECONDS}s)" >>"$LOG"
  timeout "$1" "${@:2}" >>"$LOG" 2>&1 || echo "exit $?" >>"$LOG"
}
