#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from their Go modules (through the Go module proxy) into a cache
# outside git. Both upstream root modules point their sibling modules at local folders with `replace`, which
# `go install pkg@version` refuses, so each is built from a throwaway wrapper module that pins every sibling
# to the same released version instead.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"
SPARK_OPERATOR_VERSION="${SPARK_OPERATOR_VERSION:-v2.4.0}"
CACHE="${SPARKMIRROR_CACHE:-$HOME/.cache/sparkmirror}"
# kube-apiserver, kube-controller-manager (garbage collector and namespace controllers only) and kubectl
BIN="$CACHE/bin"
mkdir -p "$BIN"
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=mod"
export CGO_ENABLED=0

modfile() { go mod download -json "$1@$2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or d["Error"])'; }

# wrapper NAME ROOT_MODULE ROOT_VERSION SIBLING_VERSION -> prints the wrapper dir
wrapper() {
  local name=$1 root=$2 rootv=$3 sibv=$4 dir="$CACHE/build/$1"
  mkdir -p "$dir"
  local gomod; gomod=$(modfile "$root" "$rootv")
  {
    echo "module sparkmirror.local/$name"
    echo "go $(go env GOVERSION | sed 's/^go//; s/\.[0-9]*$//')"
    echo "require $root $rootv"
    # every `replace X => ./local/path` of the root module becomes `replace X => X sibv`
    grep -E '^\s*[a-z0-9./-]+ => \./' "$gomod" | sed -E "s#^\s*([^ ]+) => .*#replace \1 => \1 $sibv#"
  } > "$dir/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$5" > "$dir/tools.go"
  echo "$dir"
}

build() { # name binary root rootv sibv pkg [ldflags]
  local name=$1 bin=$2 root=$3 rootv=$4 sibv=$5 pkg=$6 ldflags=${7:-}
  local stamp="$BIN/.$bin.$rootv"
  if [[ -x "$BIN/$bin" && -f "$stamp" ]] && head -c4 "$BIN/$bin" | grep -q ELF; then echo "$bin $rootv: cached"; return; fi
  local dir; dir=$(wrapper "$name" "$root" "$rootv" "$sibv" "$pkg")
  echo "$bin $rootv: building (log $dir/build.log)"
  if ! (cd "$dir" && go mod tidy >"$dir/build.log" 2>&1 && go build -trimpath -ldflags="-s -w $ldflags" -o "$BIN/$bin" "$pkg" >>"$dir/build.log" 2>&1); then
    echo "build of $bin failed; last lines of $dir/build.log:" >&2; tail -20 "$dir/build.log" >&2; exit 1
  fi
  rm -f "$BIN/.$bin".*; touch "$stamp"
}

what="${1:-all}"
# Kubernetes binaries: sibling modules are v0.<minor>.<patch>; the real version is stamped in (a module build has
# no git tree to read it from)
sib="v0.${K8S_VERSION#v1.}"
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ver="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
ver="$ver -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
if [[ $what == all || $what == etcd ]]; then
  build etcd etcd go.etcd.io/etcd/v3 "$ETCD_VERSION" "$ETCD_VERSION" go.etcd.io/etcd/server/v3
fi
if [[ $what == all || $what == k8s ]]; then
  build kubernetes kube-apiserver k8s.io/kubernetes "$K8S_VERSION" "$sib" k8s.io/kubernetes/cmd/kube-apiserver "$ver"
  build kubernetes kube-controller-manager k8s.io/kubernetes "$K8S_VERSION" "$sib" k8s.io/kubernetes/cmd/kube-controller-manager "$ver"
  build kubernetes kubectl k8s.io/kubernetes "$K8S_VERSION" "$sib" k8s.io/kubernetes/cmd/kubectl "$ver"
fi
# what a kind node runs besides the above: for the node image built by `sparkmirror dev images`
if [[ $what == node ]]; then
  for b in kubelet kubeadm kube-scheduler kube-proxy; do
    build kubernetes "$b" k8s.io/kubernetes "$K8S_VERSION" "$sib" "k8s.io/kubernetes/cmd/$b" "$ver"
  done
fi
if [[ $what == all || $what == crd ]]; then
  crd="$CACHE/crds/sparkapplications-$SPARK_OPERATOR_VERSION.yaml"
  if [[ ! -f $crd ]]; then
    mkdir -p "$CACHE/crds"
    dir=$(go mod download -json "github.com/kubeflow/spark-operator/v2@$SPARK_OPERATOR_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    cp "$dir/config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml" "$crd.tmp" && mv "$crd.tmp" "$crd"
  fi
  echo "SparkApplication CRD $SPARK_OPERATOR_VERSION: $crd"
fi
