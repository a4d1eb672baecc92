#!/usr/bin/env bash
# Fails when an import of ours points up the layering of docs/design.md
# "Layout" (the table is in test/imports/imports_test.go), or when that
# section's package table states imports other than the real ones.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

go test -count=1 ./test/imports/
