# Sourced by the set-up scripts. stage LABEL FAIL_EXIT COMMAND...: run COMMAND with its output appended
# to $STAGE_LOG and print "$STAGE_PREFIX: LABEL ... ok (N s)"; on a failure print the log's last lines and
# exit FAIL_EXIT (COMMAND's own status when FAIL_EXIT is empty).
# stage_start NAME LOG COMMAND... runs COMMAND in the background (its output in LOG) and stage_wait NAME
# LABEL waits for it and reports it the same way: two pip processes side by side use both cores of a
# small machine. A background stage still running when the script exits is stopped.
declare -A STAGE_PIDS STAGE_LOGS STAGE_STARTS

stage() {
  local label=$1 fail_exit=$2 start=$SECONDS
  shift 2
  printf '%s: %s ... ' "$STAGE_PREFIX" "$label"
  echo "== $label: $*" >> "$STAGE_LOG"
  if "$@" >> "$STAGE_LOG" 2>&1; then
    echo "ok ($((SECONDS - start)) s)"
  else
    _stage_failed $? "$STAGE_LOG" "$fail_exit"
  fi
}

# _stage_failed RC LOG [EXIT]: say the stage failed, show LOG's last lines, exit EXIT (else RC)
_stage_failed() {
  echo "failed (exit $1)"
  echo "$STAGE_PREFIX: the last lines of $2:" >&2
  tail -n 30 "$2" >&2
  exit "${3:-$1}"
}

_stage_stop_background() {
  local pid
  for pid in "${STAGE_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
}

stage_start() {
  local name=$1 log=$2
  shift 2
  echo "== $name: $*" > "$log"
  "$@" >> "$log" 2>&1 &
  STAGE_PIDS[$name]=$!
  STAGE_LOGS[$name]=$log
  STAGE_STARTS[$name]=$SECONDS
  trap _stage_stop_background EXIT
}

stage_wait() {
  local name=$1 label=$2 rc=0
  printf '%s: %s ... ' "$STAGE_PREFIX" "$label"
  wait "${STAGE_PIDS[$name]}" || rc=$?
  unset "STAGE_PIDS[$name]"
  if [ "$rc" -eq 0 ]; then
    echo "ok ($((SECONDS - STAGE_STARTS[$name])) s, started in the background)"
  else
    _stage_failed "$rc" "${STAGE_LOGS[$name]}"
  fi
}
