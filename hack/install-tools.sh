#!/usr/bin/env bash
# Builds pinned developer tools into _output/bin with 'go build'. Each tool is
# pinned by a 'tool' directive in its own small module under hack/tools/, so its
# dependency graph never meets listproxy's or kubernetes':
#
#   lint  hack/tools/lint/go.mod  -> _output/bin/golangci-lint
#   helm  hack/tools/helm/go.mod  -> _output/bin/helm
#
# Usage: hack/install-tools.sh [lint|helm]...   (no argument: all of them)
#
# A stamp file per tool, keyed on the hash of its go.mod, go.sum and this
# script, makes an up-to-date run a no-op. Modules come only from the Go module
# proxy.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/_output/bin"
mkdir -p "${bin}"
export GOWORK=off

# install NAME MODULE_DIR BINARY PACKAGE LDFLAGS_FUNC
install() {
  local name="$1" dir="$2" out="$3" pkg="$4" ldflags_func="$5"
  local stamp="${bin}/.${out}-stamp"
  local want
  want="$(cat "${dir}/go.mod" "${dir}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && -x "${bin}/${out}" ]]; then
    return 0
  fi
  echo "building ${name} (${pkg}) into ${bin}" >&2
  local ldflags
  ldflags="$(cd "${dir}" && "${ldflags_func}")"
  # -buildvcs=false: the stamp, not git state, says which version this is.
  (cd "${dir}" && go build -buildvcs=false -ldflags "${ldflags}" -o "${bin}/${out}" "${pkg}")
  echo "${want}" > "${stamp}"
}

modversion() { go list -m -f '{{.Version}}' "$1"; }

# Mirrors the release builds' version stamping, so 'golangci-lint version' and
# 'helm version' report the pinned release rather than "(devel)".
lint_ldflags() {
  local v
  v="$(modversion github.com/golangci/golangci-lint/v2)"
  echo "-X main.version=${v#v} -X main.commit=pinned -X main.date=pinned"
}

# Helm also records the client-go minor it was built with as the default
# Kubernetes version for 'helm template' and 'helm lint' (.Capabilities).
helm_ldflags() {
  local v kv minor
  v="$(modversion helm.sh/helm/v3)"
  kv="$(modversion k8s.io/client-go)"   # v0.MINOR.PATCH
  minor="$(echo "${kv}" | cut -d. -f2)"
  local f="-X helm.sh/helm/v3/internal/version.version=${v}"
  f+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    f+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${minor}"
  done
  echo "${f}"
}

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  tools=(lint helm)
fi
for t in "${tools[@]}"; do
  case "${t}" in
    lint) install lint "${root}/hack/tools/lint" golangci-lint \
            github.com/golangci/golangci-lint/v2/cmd/golangci-lint lint_ldflags ;;
    helm) install helm "${root}/hack/tools/helm" helm \
            helm.sh/helm/v3/cmd/helm helm_ldflags ;;
    *) echo "usage: $0 [lint|helm]..." >&2; exit 2 ;;
  esac
done
