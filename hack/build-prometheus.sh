#!/usr/bin/env bash
# Builds the pinned Prometheus server and promtool from
# hack/tools/prometheus/go.mod into _output/bin. The tests use promtool to
# unit-test the chart's alert rules and the server to scrape a live listproxy.
# A stamp file makes an up-to-date run a no-op; the Go build cache makes a
# rebuild of unchanged sources take seconds.
#
# Cost, measured on the 2-core development machine: see README ("make test").
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${root}/_output/bin"
dir="${root}/hack/tools/prometheus"
mkdir -p "${bin}"
export GOWORK=off

stamp="${bin}/.prometheus-stamp"
want="$(cat "${dir}/go.mod" "${dir}/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]] &&
   [[ -x "${bin}/prometheus" && -x "${bin}/promtool" ]]; then
  exit 0
fi

cd "${dir}"
# Module versions v0.3MM.P are Prometheus releases 3.MM.P; stamp that the way
# the release build does, so 'prometheus --version' names the release.
modv="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
minor="${modv#v0.3}"; minor="${minor%%.*}"; minor="$((10#${minor}))"
patch="${modv##*.}"
pv="3.${minor}.${patch}"
ldflags="-X github.com/prometheus/common/version.Version=${pv}"
ldflags+=" -X github.com/prometheus/common/version.Revision=pinned"
ldflags+=" -X github.com/prometheus/common/version.Branch=pinned"
ldflags+=" -X github.com/prometheus/common/version.BuildUser=listproxy"
ldflags+=" -X github.com/prometheus/common/version.BuildDate=pinned"

echo "building pinned Prometheus ${pv} (prometheus, promtool) into ${bin}" >&2
# remove_all_sd leaves out every service discovery but the static and file
# ones (the cloud SDKs are most of a cold build); the tests scrape static
# targets. One build for both commands: shared packages compile once.
go build -trimpath -tags remove_all_sd -ldflags "${ldflags}" -o "${bin}/" \
  github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
echo "${want}" > "${stamp}"
