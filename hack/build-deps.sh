#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver, kube-controller-manager)
# and the matching kubectl, which the e2e tests run as a real client, from
# hack/tools/go.mod into _output/bin. The Go build cache makes a rebuild of
# unchanged sources take seconds; a stamp file makes an up-to-date run a no-op.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/_output/bin"
tools="${root}/hack/tools"
mkdir -p "${bin}"

kube_version="v1.36.3"
stamp="${bin}/.deps-stamp"
want="$(cat "${tools}/go.mod" "${tools}/go.sum" "${tools}/cmd/etcd/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]] &&
   [[ -x "${bin}/etcd" && -x "${bin}/kube-apiserver" && -x "${bin}/kube-controller-manager" && -x "${bin}/kubectl" ]]; then
  exit 0
fi

# Stamp the version the way the Kubernetes release build does, so /version
# reports v1.36.3 instead of v0.0.0-master.
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${kube_version}"
  ldflags+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=36"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=2026-01-01T00:00:00Z"
done

cd "${tools}"
echo "building pinned control plane into ${bin} (a cold build takes several minutes)" >&2
go build -o "${bin}/etcd" ./cmd/etcd
go build -ldflags "${ldflags}" -o "${bin}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -ldflags "${ldflags}" -o "${bin}/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
go build -ldflags "${ldflags}" -o "${bin}/kubectl" k8s.io/kubernetes/cmd/kubectl
echo "${want}" > "${stamp}"
