#!/bin/sh
# check-layers.sh OBJ...: fail if an object calls into a concern listed
# after its own in ORDER, or code outside proc/wait/calls calls an exported
# wrapper by name (libfreeflow.map: inside the library that name binds to the
# wrapper, not to libc; such code uses ff_real.fn, lib/README.md "Rules for
# code inside the library").
#
# An object's concern is its line in LAYERS ("file concern", file without .o)
# while the sources are still flat, else the name of its directory
# (build/obj/<concern>/x.o).
# POSIX sh, awk and nm only. Lines: "up: ...", "wrapper: ...",
# "unknown concern: ..."; exit 1 if there is any.
set -eu
export LC_ALL=C
[ $# -gt 0 ] || { echo "usage: $0 OBJ..." >&2; exit 2; }
here=$(dirname "$0")
ORDER=${ORDER:-"proto core agent shm links setup proc wait calls"}
WRAPPER_OK="proc wait calls"	# may call wrappers by name: aliases, syscall(), exec family
LAYERS=${LAYERS:-$here/layers.flat}
MAP=${MAP:-$here/../libfreeflow.map}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

i=0
for c in $ORDER; do echo "$c $i"; i=$((i + 1)); done > "$tmp/rank"
# Exported names: the words between "global:" and "local:", comments left out.
sed 's|/\*.*\*/||; /\/\*/,/\*\//d' "$MAP" | sed -n '/global:/,/local:/p' |
	tr -s ' \t;' '\n\n\n' | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' | sort -u > "$tmp/exported"
[ -s "$tmp/exported" ] || { echo "check-layers: no exported names in $MAP" >&2; exit 2; }

concern() {	# concern OBJ: its LAYERS line, else its directory's name
	f=$(basename "$1" .o)
	c=$( [ -f "$LAYERS" ] && awk -v f="$f" '$1 == f { print $2 }' "$LAYERS" || true)
	[ -n "$c" ] || c=$(basename "$(dirname "$1")")
	echo "$c $f"
}
: > "$tmp/def"; : > "$tmp/use"
for o in "$@"; do
	cf=$(concern "$o")
	nm --defined-only "$o" | awk -v cf="$cf" '$2 ~ /^[TDBRWV]$/ { print $3, cf }' >> "$tmp/def"
	nm -u "$o" | awk -v cf="$cf" '{ print $2, cf }' >> "$tmp/use"
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
cat "$tmp/found"
n=$(wc -l < "$tmp/found")
[ "$n" -eq 0 ] && exit 0
echo "check-layers: $(grep -c '^up:' "$tmp/found" || true) up, $(grep -c '^wrapper:' "$tmp/found" || true) wrapper, $(grep -c '^unknown' "$tmp/found" || true) unknown" >&2
exit 1
