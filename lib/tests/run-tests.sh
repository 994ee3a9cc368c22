#!/bin/sh
# Run each test program given as an argument under `timeout 30`, print one
# line per test (PASS/FAIL/SKIP name) and a summary line; exit 1 if any
# failed. Tests exit 0 pass, 77 skip, anything else fails; a failing test's
# output is shown, indented, so the reason is in the log.
pass=0 fail=0 skip=0
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
for t in "$@"; do
	name=$(basename "$t")
	timeout 30 "$t" >"$log" 2>&1
	rc=$?
	case $rc in
	0)	pass=$((pass + 1)); echo "PASS $name" ;;
	77)	skip=$((skip + 1)); echo "SKIP $name: $(tail -n 1 "$log")" ;;
	*)	fail=$((fail + 1)); echo "FAIL $name (exit $rc$( [ $rc = 124 ] && echo ', timed out'))"
		sed 's/^/    /' "$log" ;;
	esac
done
summary="$pass passed, $fail failed"
[ "$skip" -gt 0 ] && summary="$summary, $skip skipped"
echo "$summary"
[ "$fail" -eq 0 ]
