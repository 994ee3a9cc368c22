#!/bin/sh
# Run each test program given as an argument under `timeout 30`, print one
# line per test (PASS/FAIL/SKIP name) and a summary line; exit 1 if any
# failed. Tests exit 0 pass, 77 skip, anything else fails; a failing test's
# output is shown, indented, so the reason is in the log.
#
# One suite, run per channel: a test whose source (FF_TEST_SRC/<name>.c)
# has a line "/* Channels: unix host-tcp */" proves something that must hold
# whatever channel the agent hands over, so it runs once per channel, with
# FF_TEST_CHANNEL telling the fake agent which one to make; its lines then
# read "PASS name [channel]". Every other test runs once.
pass=0 fail=0 skip=0
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT

run() {	# run <binary> <label> [channel]
	FF_TEST_CHANNEL=${3:-unix} timeout 30 "$1" >"$log" 2>&1
	rc=$?
	case $rc in
	0)	pass=$((pass + 1)); echo "PASS $2" ;;
	77)	skip=$((skip + 1)); echo "SKIP $2: $(tail -n 1 "$log")" ;;
	*)	fail=$((fail + 1)); echo "FAIL $2 (exit $rc$( [ $rc = 124 ] && echo ', timed out'))"
		sed 's/^/    /' "$log" ;;
	esac
}

for t in "$@"; do
	name=$(basename "$t")
	src=${FF_TEST_SRC:-tests}/$name.c
	channels=$(sed -n 's|^/\* Channels: \(.*\) \*/$|\1|p' "$src" 2>/dev/null)
	if [ -z "$channels" ]; then
		run "$t" "$name"
		continue
	fi
	for ch in $channels; do
		run "$t" "$name [$ch]" "$ch"
	done
done
summary="$pass passed, $fail failed"
[ "$skip" -gt 0 ] && summary="$summary, $skip skipped"
echo "$summary"
[ "$fail" -eq 0 ]
