#!/usr/bin/env bash
# Applies the automatic fixes golangci-lint offers (--fix) with .golangci.yml.
# Findings without a fix are left for hand-editing; hack/verify-golangci-lint.sh
# lists what remains.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

"${root}/hack/install-tools.sh" lint

args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=(./...)
fi
rc=0
"${root}/_output/bin/golangci-lint" run --config "${root}/.golangci.yml" --fix "${args[@]}" || rc=$?
# Exit code 1 means findings remain after fixing: expected here. Anything else
# (a bad config, a package that does not compile) is an error.
if [[ ${rc} -ne 0 && ${rc} -ne 1 ]]; then
  exit "${rc}"
fi
