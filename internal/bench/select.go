package bench

import (
	"fmt"
	"strings"
)

// selectNamed returns the entries of table whose name is in names, in
// table order; empty names means all. An unknown name is an error that
// lists the known ones; what says what kind of entry (for that message).
func selectNamed[T any](table []T, names []string, name func(T) string, what string) ([]T, error) {
	if len(names) == 0 {
		return table, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []T
	var known []string
	for _, e := range table {
		n := name(e)
		known = append(known, n)
		if want[n] {
			out = append(out, e)
			delete(want, n)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("unknown %s(s) %s; known: %s", what, strings.Join(sortedKeys(want), ","), strings.Join(known, ","))
	}
	return out, nil
}
