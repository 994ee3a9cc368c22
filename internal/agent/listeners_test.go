package agent

import "testing"

// A listener's registration ends with its process: once the process that
// sent LISTEN has exited, a CONNECT to its port is answered overlay
// (listener-not-freeflow) at once, also within nsCheckEvery of the last
// check of its namespace.
func TestListenerGoneWithItsProcess(t *testing.T) {
	nsB := makeNetns(t)
	cb := container("cb", "db", "10.244.1.3", nsB)
	cb.FreeFlow = true
	a := startAgent(t, newFakeDir(ffSelf, cb), nil)
	srv := startAsker(t, nsB, askSpec{Sock: a.cfg.LibrarySocket(), Listen: "0.0.0.0:6379",
		Ask: "accept", Local: "10.244.1.3:6379", Remote: selfCli(40100)})
	cli := newLib(t, a)
	// Registered: the connector waits for an ACCEPT, which never comes.
	if r, err := cli.connect(selfCli(40101), "10.244.1.3:6379"); err != nil || r.Reason != reasonTimeout {
		t.Fatalf("CONNECT to the live listener: %+v, %v; want overlay %s", r, err, reasonTimeout)
	}
	srv.finish()
	r, err := cli.connect(selfCli(40102), "10.244.1.3:6379")
	if err != nil || r.Reason != reasonNoListener || r.Elapsed >= meetWait {
		t.Errorf("CONNECT after the listener's process exited: %+v, %v; want overlay %s at once", r, err, reasonNoListener)
	}
}
