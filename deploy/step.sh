# Sourced by the deploy scripts: step NAME CMD... runs CMD, prints its duration, and names the step
# when it fails (then exits 1). STEP_WHAT names the script's work in those lines ("image", "cluster").
step() {
  local name=$1 t0=$SECONDS; shift
  echo "== $STEP_WHAT: $name"
  if ! "$@"; then echo "$STEP_WHAT FAILED at step: $name" >&2; exit 1; fi
  echo "== $STEP_WHAT: $name took $((SECONDS - t0)) s"
}
