#!/usr/bin/env bash
# Times the stages of `make test`: each stage's wall time is appended to
# _output/test-stages.tsv, and `print` shows them as a table at the end (or
# at the first failed stage).
#
# Usage: hack/stage-time.sh run NAME COMMAND...   run COMMAND, record NAME's time
#        hack/stage-time.sh reset                 forget earlier stages
#        hack/stage-time.sh print                 print the stages and their total
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file="${root}/_output/test-stages.tsv"

case "${1:-}" in
  run)
    name="$2"
    shift 2
    start=$(date +%s)
    "$@"
    rc=$?
    mkdir -p "$(dirname "${file}")"
    printf '%s\t%d\t%d\n' "${name}" "$(($(date +%s) - start))" "${rc}" >>"${file}"
    if [[ ${rc} -ne 0 ]]; then
      "$0" print # make stops at a failed stage: show the stages so far
    fi
    exit "${rc}"
    ;;
  reset)
    rm -f "${file}"
    ;;
  print)
    [[ -f "${file}" ]] || exit 0
    echo "make test stages ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end):"
    awk -F'\t' '{
        printf "  %-40s %6d s  %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED")
        total += $2
      }
      END { printf "  %-40s %6d s  (%d min %d s)\n", "total", total, total / 60, total % 60 }' "${file}"
    ;;
  *)
    echo "usage: $0 run NAME COMMAND... | reset | print" >&2
    exit 2
    ;;
esac
