package bench

import (
	"os/exec"
	"testing"
	"time"
)

// A server site whose experiments run no server there (mpi alone: its
// ranks come by rsh) must stay up: `bench --only mpi` found its container
// gone ("cannot open /proc/<pid>/ns/net").
func TestServerSiteWithoutServersStaysUp(t *testing.T) {
	d := &Deployment{}
	cmd := exec.Command("sh", "-c", d.serverScript(t.TempDir(), nil))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the server site's script ended at once (%v): its container would be gone", err)
	case <-time.After(300 * time.Millisecond):
	}
	_ = cmd.Process.Kill()
	<-exited
}
