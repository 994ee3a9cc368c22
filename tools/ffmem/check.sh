#!/bin/sh
# check.sh FFMEM: a short run of every mode of ffmem over an AF_UNIX socket
# in a private directory (no network traffic), and its answers to bad
# input. Exit 0 pass, 1 fail. The TCP side is run by internal/bench's
# TestExperimentsOnLoopback in a network namespace of its own.
set -u
F=$1
D=$(mktemp -d)
SRV=
MC=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; [ -n "$MC" ] && kill "$MC" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "ffmem check: FAIL: $*"; exit 1; }

# want OUTPUT KIND: one line of KIND with only positive numbers after =.
want() {
	echo "$1" | grep -q "^$2 " || fail "no $2 line in: $1"
	echo "$1" | grep "^$2 " | tr ' ' '\n' | grep = | while IFS== read -r k v; do
		case $k in cpu_a | cpu_b | misses) continue ;; esac
		awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' || { echo "$2: $k=$v is not positive"; exit 1; }
	done || fail "$1"
}

out=$("$F" limits --ms 20 --memcpy 4096,1048576 --ring-sizes 1024,1048576) || fail "limits exited $?"
want "$out" cacheline
want "$out" memcpy
want "$out" ring
[ "$(echo "$out" | grep -c '^ring ')" = 2 ] || fail "want 2 ring lines: $out"

"$F" serve --unix "$D/s" 2>"$D/serve.log" &
SRV=$!
i=0; while [ ! -S "$D/s" ]; do i=$((i + 1)); [ $i -lt 100 ] || fail "server never listened"; sleep 0.05; done
out=$("$F" pingpong --unix "$D/s" --sizes 1,65536,1048576 --ms 20) || fail "pingpong exited $?"
[ "$(echo "$out" | grep -c '^pingpong ')" = 3 ] || fail "want 3 pingpong lines: $out"
want "$out" pingpong
out=$("$F" stream --unix "$D/s" --sizes 1024,1048576 --ms 20) || fail "stream exited $?"
want "$out" stream
out=$("$F" idle --unix "$D/s" --seconds 0.2) || fail "idle exited $?"
echo "$out" | grep -q '^idle seconds=0.2' || fail "idle: $out"
[ -s "$D/serve.log" ] && fail "server complained: $(cat "$D/serve.log")"

# memcached mode against a real memcached on a socket of its own (the bench installs it).
command -v memcached >/dev/null || fail "memcached is not installed (scripts/install-deps.sh installs it)"
memcached -u root -s "$D/mc" -m 16 2>"$D/mc.log" &
MC=$!
i=0; while [ ! -S "$D/mc" ]; do i=$((i + 1)); [ $i -lt 100 ] || fail "memcached never listened: $(cat "$D/mc.log")"; sleep 0.05; done
out=$("$F" memcached --unix "$D/mc" --conns 4 --seconds 0.2 --value 3000) || fail "memcached exited $?"
want "$out" memcached
echo "$out" | grep -q " misses=0 " || fail "gets missed keys that were set: $out"
# A server that stops answering: a clear error within its 5 s, not a hang.
kill -STOP "$MC"
err=$(timeout 20 "$F" memcached --unix "$D/mc" --seconds 0.2 2>&1 >/dev/null) && fail "ffmem memcached against a stopped server succeeded"
echo "$err" | grep -q "no answer from memcached" || fail "ffmem memcached against a stopped server: $err"
kill -CONT "$MC"
kill "$MC"

# Bad input: a clear message and a non-zero exit, never a hang or a crash.
for args in "limits --cpus 0,0" "limits --ring 1000" "pingpong --unix $D/s" "pingpong --unix $D/s --sizes 0" \
	"stream --tcp nohostport --sizes 1" "idle --unix $D/nothing" "memcached --unix $D/nothing" \
	"memcached --unix $D/s --conns 0" "memcached --tcp 127.0.0.1:1 --unix $D/s" "nonsense"; do
	# shellcheck disable=SC2086
	err=$("$F" $args 2>&1 >/dev/null) && fail "ffmem $args succeeded"
	echo "$err" | grep -q "ffmem\|usage" || fail "ffmem $args: unclear error: $err"
done
echo "ffmem check: ok"
