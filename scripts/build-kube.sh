#!/usr/bin/env bash
# Builds Kubernetes' kube-apiserver, kube-controller-manager, kube-scheduler
# and kubelet (v1.34.2) from the Go module proxy, through the module in
# tools/kube, into /var/cache/freeflow/kube-v1.34.2/bin (KUBE_BIN overrides).
# Skips a binary that is already there; each appears only when complete
# (built under a temporary name, then renamed). The first build takes about
# 5 min (kube-apiserver) + 1.5 min each for the others on 2 cores; later
# ones reuse Go's build cache.
set -euo pipefail
cd "$(dirname "$0")/../tools/kube"

VERSION=v1.34.2
KUBE_BIN=${KUBE_BIN:-/var/cache/freeflow/kube-$VERSION/bin}
BINARIES=(kube-apiserver kubelet kube-controller-manager kube-scheduler)

# The version the binaries report (kubelet's node status, the apiserver's
# /version, client-go's user agent), as Kubernetes' own build sets it
# (hack/lib/version.sh); without it they say v0.0.0-master.
minor=${VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

mkdir -p "$KUBE_BIN"
for b in "${BINARIES[@]}"; do
  if [ -x "$KUBE_BIN/$b" ]; then
    continue
  fi
  echo "build-kube: building $b $VERSION into $KUBE_BIN (minutes on first build)"
  start=$SECONDS
  tmp=$(mktemp "$KUBE_BIN/.$b.XXXXXX") # two builds at once do not mix
  go build -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$b" || { rm -f "$tmp"; exit 1; }
  chmod 755 "$tmp"
  mv -f "$tmp" "$KUBE_BIN/$b"
  echo "build-kube: $b built in $((SECONDS - start)) s"
done
