# Sourced by the set-up scripts. stage LABEL FAIL_EXIT COMMAND...: run COMMAND with its output appended
# to $STAGE_LOG and print "$STAGE_PREFIX: LABEL ... ok"; on a failure print the log's last lines and exit
# FAIL_EXIT (COMMAND's own status when FAIL_EXIT is empty).
stage() {
  local label=$1 fail_exit=$2
  shift 2
  printf '%s: %s ... ' "$STAGE_PREFIX" "$label"
  echo "== $label: $*" >> "$STAGE_LOG"
  if "$@" >> "$STAGE_LOG" 2>&1; then
    echo ok
  else
    local rc=$?
    echo "failed (exit $rc)"
    echo "$STAGE_PREFIX: the last lines of $STAGE_LOG:" >&2
    tail -n 30 "$STAGE_LOG" >&2
    exit "${fail_exit:-$rc}"
  fi
}
