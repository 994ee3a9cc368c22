package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/run/freeflow/ff/a\040b`: "/run/freeflow/ff/a b",
		`/plain`:                  "/plain",
		`/tab\011x\134`:           "/tab\tx\\",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
