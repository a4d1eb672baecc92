#!/usr/bin/env bash
# Checks that every Go file in the repository is gofmt -s clean.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

# Go tooling ignores directories starting with "_" or "."; so does this.
bad="$(find . -name '*.go' -not -path './_*' -not -path '*/.*' -not -path './vendor/*' -print0 |
  xargs -0 --no-run-if-empty gofmt -s -l)"
if [[ -n "${bad}" ]]; then
  echo "These files are not gofmt -s clean:" >&2
  echo "${bad}" | sed 's/^/  /' >&2
  echo "${bad}" | xargs gofmt -s -d >&2 || true
  echo "Run hack/update-gofmt.sh to fix them." >&2
  exit 1
fi
