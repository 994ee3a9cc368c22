package cluster

import "testing"

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/run/freeflow/ff/a\040b`: "/run/freeflow/ff/a b",
		`/plain`:                  "/plain",
		`/tab\011x\134`:           "/tab\tx\\",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
