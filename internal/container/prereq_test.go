package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMissingPackagesAreNamed(t *testing.T) {
	bin := t.TempDir()
	for _, p := range []string{"ip", "mount"} { // crun and unshare missing
		if err := os.WriteFile(filepath.Join(bin, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	plugins := t.TempDir()
	os.WriteFile(filepath.Join(plugins, "freeflow-cni"), nil, 0o755)
	err := checkPrereqs([]string{plugins})
	if err == nil {
		t.Fatal("no error with crun, unshare and the CNI plugins missing")
	}
	for _, want := range []string{"apt-get install -t bookworm containernetworking-plugins crun util-linux", "CNI plugin bridge", "crun, unshare"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	os.Remove(filepath.Join(plugins, "freeflow-cni"))
	if err := checkPrereqs([]string{plugins}); err == nil || !strings.Contains(err.Error(), "freeflow-cni not found") {
		t.Errorf("missing freeflow-cni: %v", err)
	}
}
