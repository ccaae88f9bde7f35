#!/usr/bin/env bash
# Builds or fetches the lab's real servers into a cache outside the clone, once per version:
#   kube  VERSION   kube-apiserver, kube-controller-manager, kube-scheduler from k8s.io/kubernetes
#   helm  VERSION   helm from helm.sh/helm/v4
#   crds            JobSet's and Kubeflow's PyTorchJob CRDs from their Go modules (Volcano's
#                   and medik8s' are not served by the proxy: committed in fixtures/crds)
#   vm    VERSION   VictoriaMetrics' single-node server and vmalert from its Go module (the
#                   versions sites run; Debian stable's 1.79 stays in /usr/bin beside them)
#   thanos VERSION  Thanos (its ruler runs the feature rule files) from its Go module, with the
#                   replace directives its go.mod carries
#   debs            Debian unstable's Prometheus 3.5, promtool, Alertmanager 0.33,
#                   node_exporter 1.11, etcd 3.5 and kubectl (static binaries, unpacked)
#   all             everything the tests use (the versions in tests/lab/versions.env)
# The cache is $GPUWARDEN_LAB_CACHE (default ~/.cache/gpuwarden-lab). Each step is skipped when
# its outputs exist; a failed step leaves nothing half-built behind (it builds into a temporary
# directory and renames). The time and peak memory of each build are appended to
# $CACHE/build.log.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
. "$HERE/versions.env"
CACHE="${GPUWARDEN_LAB_CACHE:-$HOME/.cache/gpuwarden-lab}"
mkdir -p "$CACHE"
export GOFLAGS="${GOFLAGS:--mod=mod}"

log() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*" | tee -a "$CACHE/build.log" >&2; }

timed() { # timed LABEL CMD...: runs CMD, logs its wall time and peak memory
  local label="$1"; shift
  local t0; t0=$(date +%s)
  /usr/bin/time -f "%M" -o "$CACHE/.rss" "$@"
  log "$label: $(( $(date +%s) - t0 )) s, peak $(( $(cat "$CACHE/.rss") / 1024 )) MiB"
}

kube() {
  local v="$1" out="$CACHE/kube/$1"
  if [ -x "$out/bin/kube-apiserver" ] && [ -x "$out/bin/kube-controller-manager" ] && [ -x "$out/bin/kube-scheduler" ]; then
    return 0
  fi
  local src="$CACHE/src/kube-$v"
  rm -rf "$src" && mkdir -p "$src"
  local minor="${v#v1.}"; minor="${minor%%.*}"
  local patch="${v##*.}"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module gpuwarden.lab/kube"
    echo
    echo "go $(awk '$1=="go"{print $2; exit}' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $v"
    echo
    # each staging module k8s.io/kubernetes replaces with ./staging/... is published as v0.<minor>.<patch>
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z-]*\) => \./staging/.*#replace \1 => \1 v0.'"$minor.$patch"'#p' "$gomod"
  } >"$src/go.mod"
  cat >"$src/tools.go" <<'GO'
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
GO
  (cd "$src" && timed "kube $v go mod tidy" go mod tidy)
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  local tmp="$out.tmp"; rm -rf "$tmp"; mkdir -p "$tmp/bin"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
    (cd "$src" && timed "kube $v $cmd build" go build -p 2 -trimpath -ldflags "$ld" -o "$tmp/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
  rm -rf "$out" && mv "$tmp" "$out"
}

debs() { # Debian unstable's static Go servers, through a private apt directory (never the
  # machine's own sources: adding sid there would upgrade the system)
  local root="$CACHE/debian-sid" want=""
  for b in usr/bin/prometheus usr/bin/promtool usr/bin/prometheus-alertmanager \
           usr/bin/prometheus-node-exporter usr/bin/etcd usr/bin/kubectl; do
    [ -x "$root/$b" ] || want=1
  done
  [ -z "$want" ] && return 0
  local a="$CACHE/apt-sid"
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/debs"
  : >"$a/status" # what this machine has installed must not change the versions chosen
  sed -e 's/^Suites: .*/Suites: sid/' /etc/apt/sources.list.d/debian.sources \
    | awk 'BEGIN{RS="";ORS="\n\n"} NR==1' >"$a/sid.sources"
  local o=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$a" -o "Dir::State::Lists=$a/lists"
           -o "Dir::Cache=$a/cache" -o APT::Sandbox::User=root -o "Dir::State::status=$a/status")
  timed "debian sid apt update" apt-get "${o[@]}" update -qq
  rm -f "$a/debs/"*.deb
  # shellcheck disable=SC2086
  (cd "$a/debs" && timed "debian sid download" apt-get "${o[@]}" download $DEBIAN_SID_PACKAGES)
  local tmp="$root.tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  for d in "$a/debs/"*.deb; do dpkg -x "$d" "$tmp"; done
  rm -rf "$root" && mv "$tmp" "$root"
  log "debian sid: $(cd "$a/debs" && ls)"
}

helm() {
  local v="$1" out="$CACHE/helm/$1"
  [ -x "$out/helm" ] && return 0
  local src="$CACHE/src/helm-$v"
  rm -rf "$src" && mkdir -p "$src"
  printf 'module gpuwarden.lab/helm\n\ngo 1.26.0\n\nrequire helm.sh/helm/v4 %s\n' "$v" >"$src/go.mod"
  printf 'package tools\n\nimport _ "helm.sh/helm/v4/pkg/cmd"\n' >"$src/tools.go"
  (cd "$src" && timed "helm $v go mod tidy" go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$src" && timed "helm $v build" go build -p 2 -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$v" -o "$out.tmp/helm" helm.sh/helm/v4/cmd/helm)
  rm -rf "$out" && mv "$out.tmp" "$out"
}

vm() {
  local v="$1" out="$CACHE/victoriametrics/$1"
  [ -x "$out/bin/victoria-metrics" ] && [ -x "$out/bin/vmalert" ] && return 0
  local pkg="github.com/VictoriaMetrics/VictoriaMetrics"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/bin"
  # the module has no replace directives: go install builds it as published
  GOBIN="$out.tmp/bin" timed "victoriametrics $v build" go install -trimpath \
    -ldflags "-s -w -X $pkg/lib/buildinfo.Version=victoria-metrics-$v" \
    "$pkg/app/victoria-metrics@$v" "$pkg/app/vmalert@$v"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

thanos() {
  local v="$1" out="$CACHE/thanos/$1"
  # Thanos' release build tags (its .promu.yml). slicelabels is not optional: Thanos casts
  # Prometheus' labels.Labels to its own label slices in place, which holds only for the slice
  # layout; under Prometheus' default (stringlabels) the sidecar panics on its first gRPC
  # answer ("makeslice: len out of range") while the ruler happens to run
  local tags="netgo,slicelabels"
  [ -x "$out/thanos" ] && [ "$(cat "$out/tags" 2>/dev/null)" = "$tags" ] && return 0
  local src="$CACHE/src/thanos-$v"
  rm -rf "$src" && mkdir -p "$src"
  local gomod
  gomod=$(go mod download -json "github.com/thanos-io/thanos@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module gpuwarden.lab/thanos"
    echo
    echo "go $(awk '$1=="go"{print $2; exit}' "$gomod")"
    echo
    echo "require github.com/thanos-io/thanos $v"
    echo
    # a dependency's replace directives do not apply to its dependents: carry them over
    sed -n '/^replace (/,/^)/p' "$gomod" | grep -v '^[[:space:]]*//'
  } >"$src/go.mod"
  printf 'package tools\n\nimport _ "github.com/thanos-io/thanos/pkg/rules"\n' >"$src/tools.go"
  (cd "$src" && timed "thanos $v go mod tidy" go mod tidy)
  mkdir -p "$out.tmp"
  (cd "$src" && timed "thanos $v build" go build -p 2 -trimpath -tags "$tags" -ldflags "-s -w -X github.com/prometheus/common/version.Version=${v#v}" -o "$out.tmp/thanos" github.com/thanos-io/thanos/cmd/thanos)
  echo "$tags" >"$out.tmp/tags"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

crds() { # the CRDs their projects publish inside their Go modules (Volcano's and medik8s'
  # modules are refused by the proxy: fixtures/crds holds those, at VOLCANO_VERSION and
  # SELF_NODE_REMEDIATION_VERSION, with their origin in its README)
  local out="$CACHE/crds"
  [ -f "$out/.done" ] && [ -f "$out/jobset.x-k8s.io_jobsets.yaml" ] && [ -f "$out/kubeflow.org_pytorchjobs.yaml" ] && return 0
  mkdir -p "$out"
  local dir
  dir=$(go mod download -json "sigs.k8s.io/jobset@$JOBSET_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp "$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$out/"
  dir=$(go mod download -json "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  cp "$dir/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$out/"
  chmod 644 "$out"/*.yaml
  touch "$out/.done"
}

case "${1:-all}" in
  kube) kube "${2:-$KUBE_VERSION}" ;;
  helm) helm "${2:-$HELM_VERSION}" ;;
  crds) crds ;;
  vm) vm "${2:-$VICTORIAMETRICS_VERSION}" ;;
  thanos) thanos "${2:-$THANOS_VERSION}" ;;
  debs) debs ;;
  all) debs; crds; vm "$VICTORIAMETRICS_VERSION"; thanos "$THANOS_VERSION"; kube "$KUBE_VERSION"; helm "$HELM_VERSION"; kube "$OLDEST_KUBE_VERSION" ;;
  *) echo "usage: $0 kube|helm|vm|thanos|crds|debs|all [VERSION]" >&2; exit 2 ;;
esac
