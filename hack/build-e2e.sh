#!/usr/bin/env bash
# Builds the upstream end-to-end test binary of one Kubernetes release (default:
# the default one in hack/kube-versions) from its module hack/tools/e2e-MAJOR.MINOR
# into _output/e2e-vVERSION/e2e.test, which `make conformance` runs (see
# hack/conformance). The binary is about 200 MB and a cold build takes minutes;
# a stamp file makes an up-to-date run a no-op.
#
# Usage: hack/build-e2e.sh [VERSION]     e.g. hack/build-e2e.sh 1.31.14
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GOWORK=off

v="${1:-$(awk '$1 == "default" {print $2}' "${root}/hack/kube-versions")}"
v="${v#v}"
major="$(echo "${v}" | cut -d. -f1)"
minor="$(echo "${v}" | cut -d. -f2)"
tools="${root}/hack/tools/e2e-${major}.${minor}"
out="${root}/_output/e2e-v${v}"
if ! grep -qE "^[[:space:]]*k8s.io/kubernetes v${v}\$" "${tools}/go.mod" 2>/dev/null; then
  echo "no module pins k8s.io/kubernetes v${v} for the e2e binary (hack/tools/e2e-${major}.${minor}/go.mod)" >&2
  exit 1
fi
mkdir -p "${out}"
stamp="${out}/.e2e-stamp"
want="$(cat "${tools}/go.mod" "${tools}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && -x "${out}/e2e.test" ]]; then
  exit 0
fi

# Stamp the version the way the Kubernetes release build does, as
# hack/build-deps.sh does for the control plane.
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=v${v}"
  ldflags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=2026-01-01T00:00:00Z"
done

echo "building the e2e test binary v${v} into ${out} (a cold build takes several minutes)" >&2
rm -f "${stamp}"
(
  cd "${tools}"
  go test -c -ldflags "${ldflags}" -o "${out}/e2e.test" k8s.io/kubernetes/test/e2e
)
echo "${want}" > "${stamp}"
