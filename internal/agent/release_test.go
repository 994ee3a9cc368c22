package agent

import (
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// TestReleaseClosesSessionsAndRefusesNew: RELEASE (a migration's, before
// CRIU's dump) closes the container's open sessions and closes new ones at
// accept until its time, or until a RELEASE with a past time; an unknown
// container is NOTFOUND. (The admin socket refuses this process, registered as the
// container; the CLI's call is in e2e TestMigrateLibraryContainer.)
func TestReleaseClosesSessionsAndRefusesNew(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	lib := newLib(t, a)
	if _, err := lib.lookup(selfContainer.IP); err != nil {
		t.Fatalf("a session before RELEASE: %v", err)
	}

	if err := a.release(selfContainer.ID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := lib.lookup(selfContainer.IP); err == nil {
		t.Fatal("a session open at RELEASE still answers")
	}
	if l, err := dialLib(a.cfg.LibrarySocket()); err == nil {
		l.conn.Close()
		t.Fatal("a session opened while the container is held was served")
	}

	if err := a.release(selfContainer.ID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := newLib(t, a).lookup(selfContainer.IP); err != nil {
		t.Fatalf("a session after the hold ended: %v", err)
	}

	if err := a.release(selfContainer.ID, time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := newLib(t, a).lookup(selfContainer.IP); err != nil {
		t.Fatalf("a session after the hold's time passed: %v", err)
	}

	wantCode(t, a.release("nosuch0", time.Now().Add(time.Minute)), protocol.CodeNotFound)
}
