package ffspec

import (
	"slices"
	"testing"
)

// TestPreloadKeepsTheProgramsOwn: a container whose image already preloads
// a library (jemalloc, a profiler) keeps it, behind FreeFlow's; giving a
// container FreeFlow twice names the library once.
func TestPreloadKeepsTheProgramsOwn(t *testing.T) {
	cases := []struct {
		name     string
		env, out []string
	}{
		{"none", []string{"PATH=/bin"}, []string{"PATH=/bin", "LD_PRELOAD=" + ContainerLibrary}},
		{"empty", []string{"LD_PRELOAD="}, []string{"LD_PRELOAD=" + ContainerLibrary}},
		{"own", []string{"LD_PRELOAD=/usr/lib/libjemalloc.so.2", "A=1"},
			[]string{"LD_PRELOAD=" + ContainerLibrary + ":/usr/lib/libjemalloc.so.2", "A=1"}},
		{"twice", []string{"LD_PRELOAD=/x.so " + ContainerLibrary}, []string{"LD_PRELOAD=/x.so " + ContainerLibrary}},
	}
	for _, c := range cases {
		in := slices.Clone(c.env)
		if got := Preload(c.env); !slices.Equal(got, c.out) {
			t.Errorf("%s: Preload(%q) = %q, want %q", c.name, c.env, got, c.out)
		}
		if !slices.Equal(c.env, in) {
			t.Errorf("%s: Preload changed its argument to %q", c.name, c.env)
		}
	}
}
