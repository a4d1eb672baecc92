#!/usr/bin/env bash
# Rewrites every Go file in the repository with gofmt -s (simplify), the form
# hack/verify-gofmt.sh checks.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

# Go tooling ignores directories starting with "_" or "."; so does this.
find . -name '*.go' -not -path './_*' -not -path '*/.*' -not -path './vendor/*' -print0 |
  xargs -0 --no-run-if-empty gofmt -s -w
