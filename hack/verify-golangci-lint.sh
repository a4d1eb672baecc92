#!/usr/bin/env bash
# Runs the pinned golangci-lint (hack/tools/lint/go.mod, built into
# _output/bin by hack/install-tools.sh) with .golangci.yml over listproxy's
# module. Extra arguments go to 'golangci-lint run', e.g. ./pkg/paging/...
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

"${root}/hack/install-tools.sh" lint

args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=(./...)
fi
if ! "${root}/_output/bin/golangci-lint" run --config "${root}/.golangci.yml" "${args[@]}"; then
  echo "Run hack/update-golangci-lint.sh to apply the automatic fixes; fix the rest by hand." >&2
  exit 1
fi
