package runtimewrap

import "testing"

// TestParseArgsShimCommandLines: the command lines containerd's runc shim
// (go-runc) and people give runc.
func TestParseArgsShimCommandLines(t *testing.T) {
	cases := []struct {
		args        []string
		sub, bundle string
	}{
		{[]string{"--root", "/run/containerd/runc/k8s.io", "--log", "/run/x/log.json", "--log-format", "json",
			"create", "--bundle", "/run/b", "--pid-file", "/run/b/init.pid", "abc"}, "create", "/run/b"},
		{[]string{"--root=/r", "--systemd-cgroup", "create", "--pid-file", "p", "-b", "/b", "id"}, "create", "/b"},
		{[]string{"run", "--bundle=/b2", "id"}, "run", "/b2"},
		{[]string{"--debug", "create", "id"}, "create", "."},
		{[]string{"--root", "/r", "delete", "--force", "id"}, "delete", "."},
		{[]string{"--version"}, "", ""},
	}
	for _, c := range cases {
		cl := parseArgs(c.args)
		if cl.sub != c.sub || (c.sub != "" && cl.bundle() != c.bundle) {
			t.Errorf("parseArgs(%q): %q, %q; want %q, %q", c.args, cl.sub, cl.bundle(), c.sub, c.bundle)
		}
	}
	exec := parseArgs([]string{"--root", "/r", "--log", "l", "exec", "--process", "/tmp/p.json", "--detach", "--pid-file", "x", "id"})
	if p, ok := exec.flag("process", "p"); !ok || p != "/tmp/p.json" || len(exec.globals) != 4 {
		t.Errorf("exec: process %q %v, globals %q", p, ok, exec.globals)
	}
}
