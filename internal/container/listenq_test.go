package container

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// queued counts what a listener's accept queue holds: two connections made
// to a listener of the test's own that has accepted none, then one.
func TestQueuedCountsUnacceptedConnections(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := fmt.Sprintf(":%04X ", ln.Addr().(*net.TCPAddr).Port)
	ours := func() int { // the listener's line and its connections' only
		b, err := os.ReadFile("/proc/self/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		table := lines[0]
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 2 && strings.HasSuffix(f[1]+" ", port) {
				table += "\n" + l
			}
		}
		n, _ := queued(table)
		return n
	}
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for end := time.Now().Add(5 * time.Second); ours() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d queued, want the 2 connections made", ours())
		}
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n := ours(); n != 1 {
		t.Errorf("after one accept: %d queued, want 1", n)
	}
}
