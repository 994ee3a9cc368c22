#!/usr/bin/env bash
# Installs what FreeFlow needs on a Debian bookworm machine, and only what is
# missing; says what it installs. Safe to run again (idempotent).
set -euo pipefail

# Debian packages: runtime parts (crun, CNI plugins, etcd, iproute2, iptables
# for the agent's fabric guard, nftables for the overlay guard and the
# per-container source checks) and the real programs the tests and benchmarks
# run inside containers.
PACKAGES=(
  crun containernetworking-plugins etcd-server etcd-client iproute2 iptables nftables util-linux procps
  iperf3 sockperf netpipe-tcp python3
  # event loops and io_uring the e2e tests and the bench run on shm: asyncio on uvloop (libuv), Node.js,
  # liburing. Not here: cargo for the tokio echo, as bookworm's Rust (1.63) is older than tokio needs
  # (1.85): with Rust from rustup the tokio test and bench rows run; without, they say why not.
  python3-uvloop nodejs liburing2
  # applications `freeflow bench` runs as server + client containers
  redis-server redis-tools nginx-light wrk memcached libmemcached-tools postgresql
  # Open MPI between containers (tests/e2e; its headers for mpicc to build the reduction test's
  # program), curl for nginx checks
  openmpi-bin libopenmpi-dev netpipe-openmpi curl
  # the virtual verbs device: stock libibverbs and the Debian programs that run on it (rdma-core's
  # own test suite ships with python3-pyverbs); cmake to
  # generate rdma-core's provider headers (below); UCX's ucx_perftest (UCX itself comes with Open MPI)
  libibverbs1 ibverbs-utils perftest rdmacm-utils python3-pyverbs cmake ucx-utils
  # Kubernetes nodes of the test harness (internal/testenv/kube, docs/KUBERNETES.md): containerd 1.6
  # with its CRI plugin, runc under it; the CNI plugins are above
  containerd runc
)
CNITOOL_VERSION=v1.2.3 # matches github.com/containernetworking/cni in go.mod
CRICTL_VERSION=v1.34.0 # the CRI client of Kubernetes v1.34, the release scripts/build-kube.sh builds

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root (apt-get install); try: sudo $0" >&2
  exit 1
fi

# missing_packages NAME...: the ones dpkg does not have installed, in $missing.
missing_packages() {
  missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
}

# unpack_debian_source URL SHA256 DIR: fetches a Debian source tarball,
# checks it against SHA256 and unpacks it next to DIR (the tarball's own
# top directory must be DIR's name).
unpack_debian_source() {
  local url=$1 sum=$2 dir=$3 tmp
  tmp=$(mktemp -d)
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  curl -fsS -o "$tmp/src" "$url" ||
    { echo "install-deps: cannot fetch $url" >&2; exit 1; }
  echo "$sum  $tmp/src" | sha256sum -c --quiet - ||
    { echo "install-deps: $url does not have the expected SHA-256" >&2; exit 1; }
  tar xf "$tmp/src" -C "$(dirname "$dir")"
  rm -rf "$tmp"
}

missing_packages "${PACKAGES[@]}"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The bench runs redis, nginx, memcached and PostgreSQL itself, inside
  # containers; none of them may start as a machine service on install.
  # policy-rc.d exiting 101 tells invoke-rc.d so. Only a file made here is
  # removed again.
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# made by freeflow install-deps for the install only\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=/usr/sbin/policy-rc.d
    trap 'rm -f "$made_policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq -t bookworm "${missing[@]}" >/dev/null
else
  echo "install-deps: Debian packages present"
fi

# The etcd-server package may start a system etcd on 127.0.0.1:2379 where an
# init system exists; FreeFlow runs its own etcd per cluster and needs no
# system one. Nothing to do here when none runs.

if ! command -v cnitool >/dev/null 2>&1; then
  echo "install-deps: installing cnitool $CNITOOL_VERSION (go install) into /usr/local/bin"
  GOBIN=/usr/local/bin go install "github.com/containernetworking/cni/cnitool@$CNITOOL_VERSION"
fi

if ! command -v crictl >/dev/null 2>&1; then
  echo "install-deps: installing crictl $CRICTL_VERSION (go install) into /usr/local/bin"
  GOBIN=/usr/local/bin go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
fi

# The directories a Kubernetes node has (its packages make them); each
# test node binds its own over them in a private mount namespace, so they
# stay empty here.
mkdir -p /etc/cni/net.d /opt/cni/bin /var/lib/kubelet /var/log/pods /var/lib/cni /run/containerd /etc/containerd /opt/freeflow

# Kubernetes' control plane and kubelet are not packaged: built from the Go
# module proxy (minutes the first time; skipped when built).
"$(dirname "$0")/build-kube.sh"

# rdma-core's provider headers (infiniband/driver.h and the kernel ABI
# headers it includes), which the verbs provider (lib/src/verbs) is built
# against and no Debian package installs: Debian's source package of
# rdma-core, fetched from the Debian archive, checked against the hash below,
# unpacked into /var/cache/freeflow and configured with cmake; only the
# generated headers are built (about 20 s). Release 56.1 has the provider ABI
# of bookworm's libibverbs 44 (IBVERBS_PRIVATE_34); the archive no longer
# serves 44.0's tarball.
RDMA_CORE_VERSION=56.1
RDMA_CORE_SHA256=63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8
RDMA_CORE_URL=http://deb.debian.org/debian/pool/main/r/rdma-core/rdma-core_${RDMA_CORE_VERSION}.orig.tar.gz
RDMA_CORE=/var/cache/freeflow/rdma-core-$RDMA_CORE_VERSION
if [ ! -e "$RDMA_CORE/build/include/infiniband/driver.h" ]; then
  echo "install-deps: building rdma-core $RDMA_CORE_VERSION's provider headers from Debian's source package into $RDMA_CORE"
  unpack_debian_source "$RDMA_CORE_URL" "$RDMA_CORE_SHA256" "$RDMA_CORE"
  mkdir -p "$RDMA_CORE/build"
  (cd "$RDMA_CORE/build" &&
    cmake -G "Unix Makefiles" -DNO_MAN_PAGES=1 -DNO_PYVERBS=1 -DENABLE_STATIC=0 -DENABLE_RESOLVE_NEIGH=0 .. >cmake.log 2>&1 &&
    make kern-abi >make.log 2>&1) ||
    { echo "install-deps: generating rdma-core's headers failed; see $RDMA_CORE/build/*.log" >&2; exit 1; }
fi

# CRIU for `freeflow migrate`: bookworm's criu 3.17 fails on this kernel (its
# vDSO layout), so CRIU 4.2.1 is built from Debian's source package (fetched
# from the Debian archive, checked against the hash below, about 35 s) into
# /var/cache/freeflow and linked as /usr/local/sbin/criu, which comes before
# /usr/sbin on root's PATH. Its build dependencies are bookworm packages.
CRIU_VERSION=4.2.1
CRIU_SHA256=29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9
CRIU_URL=http://deb.debian.org/debian/pool/main/c/criu/criu_${CRIU_VERSION}.orig.tar.xz
CRIU_DIR=/var/cache/freeflow/criu-$CRIU_VERSION
CRIU_BUILD_DEPS=(libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf libnl-3-dev libnet1-dev
  libcap-dev libnftables-dev uuid-dev pkg-config libbsd-dev libaio-dev xz-utils)
if ! /usr/local/sbin/criu --version 2>/dev/null | grep -q "Version: $CRIU_VERSION"; then
  echo "install-deps: building CRIU $CRIU_VERSION from Debian's source package into $CRIU_DIR (bookworm's criu fails on this kernel)"
  missing_packages "${CRIU_BUILD_DEPS[@]}"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing CRIU's build dependencies: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm "${missing[@]}" >/dev/null
  fi
  unpack_debian_source "$CRIU_URL" "$CRIU_SHA256" "$CRIU_DIR"
  make -C "$CRIU_DIR" -j"$(nproc)" NO_GNUTLS=1 criu >"$CRIU_DIR/build.log" 2>&1 ||
    { echo "install-deps: building CRIU failed; see $CRIU_DIR/build.log" >&2; exit 1; }
  ln -sf "$CRIU_DIR/criu/criu" /usr/local/sbin/criu
fi

echo "install-deps: downloading Go modules"
go mod download
