#!/bin/sh
# check-layers.sh FILE...: fail if an object (.o) calls into a concern
# listed after its own in ORDER, or code outside proc/wait/calls/verbs calls an
# exported wrapper by name (libfreeflow.map: inside the library that name
# binds to the wrapper, not to libc; such code uses ff_real.fn, lib/README.md
# "Rules for code inside the library"), or a source (.c, .h) includes a
# header of a concern listed after its own.
#
# A file's concern is the name of its directory (build/obj/<concern>/x.o,
# src/<concern>/x.c). An included header's concern is its directory
# ("core/core.h"), or the including file's for a header beside it;
# "freeflow/*.h" (the public headers) may be included anywhere.
# POSIX sh, awk and nm only. Lines: "up: ...", "wrapper: ...",
# "include: ...", "unknown concern: ..."; exit 1 if there is any.
set -eu
export LC_ALL=C
[ $# -gt 0 ] || { echo "usage: $0 FILE..." >&2; exit 2; }
here=$(dirname "$0")
ORDER=${ORDER:-"proto core agent shm links setup proc wait calls verbs"}
# May call wrappers by name: aliases, syscall(), exec family; verbs is a
# library of its own (the provider), whose calls are a program's.
WRAPPER_OK="proc wait calls verbs"
MAP=${MAP:-$here/../libfreeflow.map}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

i=0
for c in $ORDER; do echo "$c $i"; i=$((i + 1)); done > "$tmp/rank"
# Exported names: the words between "global:" and "local:", comments left out.
sed 's|/\*.*\*/||; /\/\*/,/\*\//d' "$MAP" | sed -n '/global:/,/local:/p' |
	tr -s ' \t;' '\n\n\n' | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' | sort -u > "$tmp/exported"
[ -s "$tmp/exported" ] || { echo "check-layers: no exported names in $MAP" >&2; exit 2; }

concern() {	# concern FILE: its directory's name, and its name without the suffix
	f=$(basename "$1")
	echo "$(basename "$(dirname "$1")") ${f%.*}"
}
: > "$tmp/def"; : > "$tmp/use"; : > "$tmp/incl"
for o in "$@"; do
	case $o in
	*.o)	cf=$(concern "$o")
		nm --defined-only "$o" | awk -v cf="$cf" '$2 ~ /^[TDBRWV]$/ { print $3, cf }' >> "$tmp/def"
		nm -u "$o" | awk -v cf="$cf" '{ print $2, cf }' >> "$tmp/use" ;;
	*.c|*.h) c=$(concern "$o"); c=${c%% *}
		sed -n 's/^#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$o" |
			awk -v c="$c" -v f="$(basename "$o")" '{ print c, f, $1 }' >> "$tmp/incl" ;;
	*)	echo "check-layers: $o is no object or source" >&2; exit 2 ;;
	esac
done
sort -k1,1 -o "$tmp/def" "$tmp/def"
sort -k1,1 -o "$tmp/use" "$tmp/use"

# Uses: "sym concern file"; joined with the definitions:
# "sym caller-concern caller-file callee-concern callee-file".
{ join "$tmp/use" "$tmp/def"; awk '{ print $0, "-", "-" }' "$tmp/use"; } | sort -u |
	awk -v rf="$tmp/rank" -v ef="$tmp/exported" -v ok="$WRAPPER_OK" '
	BEGIN { while ((getline l < rf) > 0) { split(l, a, " "); r[a[1]] = a[2] }
		while ((getline l < ef) > 0) x[l] = 1
		n = split(ok, o, " "); for (i = 1; i <= n; i++) w[o[i]] = 1 }
	!($2 in r) { u[$2 "/" $3] = 1; next }
	$4 == "-" { if (($1 in x) && !($2 in w))
			print "wrapper: " $2 "/" $3 " calls " $1 " (use ff_real." $1 ")"
		next }
	!($4 in r) { u[$4 "/" $5] = 1; next }
	r[$4] > r[$2] { print "up: " $2 "/" $3 " -> " $4 "/" $5 " (" $1 ")" }
	END { for (k in u) print "unknown concern: " k }' > "$tmp/found"

# Includes: "concern file header"; the header's concern as the comment above says.
awk -v rf="$tmp/rank" '
	BEGIN { while ((getline l < rf) > 0) { split(l, a, " "); r[a[1]] = a[2] } }
	{ h = $3
	  if (h ~ /^freeflow\//) next
	  hc = $1
	  if (h ~ /\//) { hc = h; sub(/\/.*/, "", hc) }
	  if (!($1 in r)) { u[$1 "/" $2] = 1; next }
	  if (!(hc in r)) { u[hc " (" h ")"] = 1; next }
	  if (r[hc] > r[$1]) print "include: " $1 "/" $2 " includes " h " (" hc ")" }
	END { for (k in u) print "unknown concern: " k }' "$tmp/incl" >> "$tmp/found"
cat "$tmp/found"
n=$(wc -l < "$tmp/found")
[ "$n" -eq 0 ] && exit 0
echo "check-layers: $(grep -c '^up:' "$tmp/found" || true) up, $(grep -c '^wrapper:' "$tmp/found" || true) wrapper, $(grep -c '^include:' "$tmp/found" || true) include, $(grep -c '^unknown' "$tmp/found" || true) unknown" >&2
exit 1
