#!/usr/bin/env bash
# The main job: a two-host cluster, containers talking same-host and
# cross-host by name, then the quick side-by-side benchmark. Everything the
# demo creates is removed at the end, also when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ff() { bin/freeflow --cluster demo "$@"; }
step() { printf '\n\033[1m$ freeflow %s\033[0m\n' "$*"; }
run() { step "$@"; ff "$@"; }

trap 'step cluster down; ff cluster down' EXIT
ff cluster down >/dev/null 2>&1 || true # a previous demo killed halfway

run cluster up --hosts 2
run run --host h1 --name srv --tenant blue -d -- iperf3 -s
# iperf3 needs a moment to listen; wait for it rather than guess.
ff exec srv -- sh -c 'for i in $(seq 100); do ss -ltn | grep -q ":5201 " && exit 0; sleep 0.05; done; exit 1'
run run --host h1 --name near --tenant blue --rm -- iperf3 -c srv -t 3
run run --host h2 --name far --tenant blue --rm -- iperf3 -c srv -t 3
run ps
run exec srv -- ip -brief addr
run status
run rm -f srv
step "bench --quick   (its own cluster, side by side)"
bin/freeflow bench --quick
