package asyncecho

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	r, err := Parse("round 0.5\nround 1.250000\nfailed reset 1 timeout 2 other 3\nOK 58\n")
	want := Result{Rounds: []float64{0.5, 1.25}, Reset: 1, Timeout: 2, Other: 3, OK: 58}
	if err != nil || !reflect.DeepEqual(r, want) || r.Failed() != 6 {
		t.Fatalf("Parse = %+v, %v; want %+v", r, err, want)
	}
	for _, bad := range []string{"", "round 1\n", "OK 3\n", "round x\nOK 1\n", "round 1\nstray\nOK 1\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}
