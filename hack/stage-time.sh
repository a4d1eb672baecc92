#!/usr/bin/env bash
# Times the stages of `make test`: each stage's start (seconds since the
# reset) and wall time are appended to _output/test-stages.tsv, and `print`
# shows them as a table at the end (or at the first failed stage). Stages
# that run side by side overlap, so the table gives the wall time since the
# reset as well as each stage's own.
#
# Usage: hack/stage-time.sh run NAME COMMAND...   run COMMAND, record NAME's time
#        hack/stage-time.sh reset                 forget earlier stages, start the clock
#        hack/stage-time.sh print                 print the stages and the wall time
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file="${root}/_output/test-stages.tsv"
clock="${root}/_output/test-stages.start"

# since prints the seconds since the reset (0 when there was none).
since() {
  local start
  start="$(cat "${clock}" 2>/dev/null || date +%s)"
  echo $(($(date +%s) - start))
}

case "${1:-}" in
  run)
    name="$2"
    shift 2
    offset="$(since)"
    start=$(date +%s)
    "$@"
    rc=$?
    mkdir -p "$(dirname "${file}")"
    printf '%s\t%d\t%d\t%d\n' "${name}" "${offset}" "$(($(date +%s) - start))" "${rc}" >>"${file}"
    if [[ ${rc} -ne 0 ]]; then
      "$0" print # make stops at a failed stage: show the stages so far
    fi
    exit "${rc}"
    ;;
  reset)
    mkdir -p "$(dirname "${file}")"
    rm -f "${file}"
    date +%s >"${clock}"
    ;;
  print)
    [[ -f "${file}" ]] || exit 0
    echo "make test stages ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end):"
    printf '  %-28s %8s %8s\n' "stage" "start" "seconds"
    sort -t$'\t' -k2,2n "${file}" | awk -F'\t' '{
        printf "  %-28s %6d s %6d s  %s\n", $1, $2, $3, ($4 == 0 ? "ok" : "FAILED")
      }'
    wall="$(since)"
    printf '  %-28s %8s %6d s  (%d min %d s)\n' "wall time" "" "${wall}" $((wall / 60)) $((wall % 60))
    ;;
  *)
    echo "usage: $0 run NAME COMMAND... | reset | print" >&2
    exit 2
    ;;
esac
