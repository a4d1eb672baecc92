#!/usr/bin/env bash
# Runs go vet over listproxy's module. (The pinned tool modules under
# hack/tools/ hold no code of ours beyond small mains, and vetting them would
# type-check all of kubernetes.)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

if ! go vet ./... ; then
  echo "go vet found problems (above). No hack/update-*.sh fixes these: fix them by hand;" >&2
  echo "hack/update-golangci-lint.sh applies the automatic fixes some lint findings have." >&2
  exit 1
fi
