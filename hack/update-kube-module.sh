#!/usr/bin/env bash
# Writes the pinned module for one control-plane version, hack/tools/kube-MAJOR.MINOR,
# and resolves its go.sum. Run it only to add or move a version; the committed
# go.mod and go.sum are what hack/build-deps.sh builds from and verifies against.
#
# Usage: [ALIGN_WITH_LISTPROXY=1] hack/update-kube-module.sh KUBE_VERSION ETCD_VERSION
#   e.g. ALIGN_WITH_LISTPROXY=1 hack/update-kube-module.sh 1.37.2 3.7.0
#
# ALIGN_WITH_LISTPROXY=1 (for the default release, whose k8s.io modules are
# the ones listproxy requires) raises every module the two share to
# listproxy's version where listproxy's is newer. The shared packages then
# compile to the same build-cache entries, so that listproxy and the 1.37
# Table oracle reuse what the control-plane build compiled.
#
# ETCD_VERSION is the etcd server built beside the control plane: the one the
# release's own go.mod pins (k8s.io/kubernetes requires its etcd client at that
# version), so etcd and the apiserver's client come from one release train.
#
# Every sum is checked against the public checksum database (GOSUMDB is left
# on); a staging tag the module proxy does not serve is replaced by the newest
# earlier patch it does serve (staging_version below), which the database
# knows.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 KUBE_VERSION ETCD_VERSION" >&2
  exit 2
fi
kv="${1#v}"; ev="${2#v}"
minor="$(echo "${kv}" | cut -d. -f2)"
patch="$(echo "${kv}" | cut -d. -f3)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${root}/hack/tools/kube-1.${minor}"
export GOWORK=off
mkdir -p "${dir}/cmd/etcd"

staging="$(go mod download -json "k8s.io/kubernetes@v${kv}" |
  sed -n 's/.*"GoMod": "\(.*\)",/\1/p' | xargs grep -E '=> \./staging/' | awk '{print $1}')"

# staging_version MODULE prints v0.MINOR.PATCH, or, when the module proxy does
# not serve that tag, the newest v0.MINOR.x before it that it does serve (and
# says so on stderr): staging modules carry API types and helpers that do not
# change within a patch series.
staging_version() {
  local m="$1" want="v0.${minor}.${patch}" have
  if go mod download "${m}@${want}" 2>/dev/null; then
    echo "${want}"
    return
  fi
  have="$(go list -m -versions "${m}" 2>/dev/null | tr ' ' '\n' | grep -E "^v0\.${minor}\.[0-9]+$" |
    sort -t. -k3,3n | awk -F. -v p="${patch}" '$3 <= p' | tail -1)"
  if [[ -z "${have}" ]]; then
    # Not served at all: nothing the build imports (sample-*); tidy says if it is.
    echo "${want}"
    return
  fi
  if [[ "${have}" != "${want}" ]]; then
    echo "${m}: the module proxy does not serve ${want}; pinning ${have}" >&2
  fi
  echo "${have}"
}

{
  echo "// Module kube pins one control-plane release, k8s.io/kubernetes v${kv}, and the"
  echo "// etcd server it is tested with. hack/build-deps.sh builds etcd, kube-apiserver,"
  echo "// kube-controller-manager and kubectl from it into _output/kube-v${kv}/bin."
  echo "// Written by hack/update-kube-module.sh; it never meets listproxy's own module"
  echo "// (with ALIGN_WITH_LISTPROXY=1 it shares the versions of the modules both use)."
  echo "module github.com/listproxy/listproxy/hack/tools/kube-1.${minor}"
  echo
  echo "go 1.26.0"
  echo
  echo "require ("
  echo "	go.etcd.io/etcd/server/v3 v${ev}"
  echo "	k8s.io/kubernetes v${kv}"
  echo ")"
  echo
  echo "// k8s.io/kubernetes refers to its staging modules by relative path; pin each"
  echo "// to the release tagged with the same minor and patch."
  echo "replace ("
  for m in ${staging}; do
    echo "	${m} => ${m} $(staging_version "${m}")"
  done
  echo ")"
} > "${dir}/go.mod"

cat > "${dir}/tools.go" <<GO
//go:build tools

// Package tools records the binaries this module builds so 'go mod tidy'
// keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO

cat > "${dir}/cmd/etcd/main.go" <<GO
// Command etcd is the etcd server, built from this module's pinned go.etcd.io/etcd/server/v3.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
GO

rm -f "${dir}/go.sum"
cd "${dir}"
go mod tidy

if [[ "${ALIGN_WITH_LISTPROXY:-}" == 1 ]]; then
  # Modules both build lists hold, at listproxy's version where it is newer.
  raise="$(join <(go list -m -f '{{.Path}} {{.Version}}' all | sort) \
                <(cd "${root}" && go list -m -f '{{.Path}} {{.Version}}' all | sort) |
    awk '$2 != $3 {print $1, $2, $3}' | while read -r m ours theirs; do
      if [[ "$(printf '%s\n%s\n' "${ours}" "${theirs}" | sort -V | tail -1)" == "${theirs}" ]]; then
        echo "${m}@${theirs}"
      fi
    done)"
  if [[ -n "${raise}" ]]; then
    # shellcheck disable=SC2086 # one argument per module
    go get ${raise}
    go mod tidy
  fi
fi
