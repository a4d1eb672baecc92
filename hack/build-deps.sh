#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler) and the matching kubectl, which the e2e tests run as a real client, for each
# version named (default: the default one in hack/kube-versions) from its module
# hack/tools/kube-MAJOR.MINOR into _output/kube-vVERSION/bin. The Go build cache
# makes a rebuild of unchanged sources take seconds; a stamp file per version
# makes an up-to-date run a no-op.
#
# KUBE_COMMANDS narrows the Kubernetes commands built (default: all four),
# e.g. for a release whose tests never run the scheduler; etcd is always built.
#
# Usage: [KUBE_COMMANDS="kube-apiserver ..."] hack/build-deps.sh [VERSION...]
#        e.g. hack/build-deps.sh 1.37.2 1.31.14
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOWORK=off

read -r -a commands <<<"${KUBE_COMMANDS:-kube-apiserver kube-controller-manager kube-scheduler kubectl}"

versions=("$@")
if [[ ${#versions[@]} -eq 0 ]]; then
  versions=("$(awk '$1 == "default" {print $2}' "${root}/hack/kube-versions")")
fi

build() {
  local v="${1#v}"
  local major minor tools bin stamp want cmd missing="" pkgs=()
  major="$(echo "${v}" | cut -d. -f1)"
  minor="$(echo "${v}" | cut -d. -f2)"
  tools="${root}/hack/tools/kube-${major}.${minor}"
  bin="${root}/_output/kube-v${v}/bin"
  if ! grep -qE "^[[:space:]]*k8s.io/kubernetes v${v}\$" "${tools}/go.mod" 2>/dev/null; then
    echo "no module pins k8s.io/kubernetes v${v} (hack/tools/kube-${major}.${minor}/go.mod); see hack/update-kube-module.sh" >&2
    exit 1
  fi
  mkdir -p "${bin}"
  stamp="${bin}/.deps-stamp"
  want="$(cat "${tools}/go.mod" "${tools}/go.sum" "${tools}/cmd/etcd/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
  for cmd in etcd "${commands[@]}"; do
    [[ -x "${bin}/${cmd}" ]] || missing+=" ${cmd}"
  done
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && -z "${missing}" ]]; then
    return 0
  fi
  for cmd in "${commands[@]}"; do
    pkgs+=("k8s.io/kubernetes/cmd/${cmd}")
  done

  # Stamp the version the way the Kubernetes release build does, so /version
  # reports the release instead of v0.0.0-master.
  local ldflags="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=v${v}"
    ldflags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=2026-01-01T00:00:00Z"
  done

  echo "building control plane v${v} into ${bin} (a cold build takes several minutes)" >&2
  (
    cd "${tools}"
    go build -o "${bin}/etcd" ./cmd/etcd
    # One build for the Kubernetes commands: their shared packages compile
    # once and the links run in parallel.
    go build -ldflags "${ldflags}" -o "${bin}/" "${pkgs[@]}"
  )
  echo "${want}" > "${stamp}"
}

for v in "${versions[@]}"; do
  build "${v}"
done
