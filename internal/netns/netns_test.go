package netns

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testNS creates a uniquely named namespace, removed when the test ends.
func testNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	b := make([]byte, 4)
	rand.Read(b)
	name := fmt.Sprintf("tnetns%x", b)
	if err := Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Delete(name); err != nil {
			t.Error(err)
		}
	})
	return name
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestCreateDeleteIdempotent(t *testing.T) {
	name := testNS(t)
	if !Exists(name) {
		t.Fatalf("%s does not exist after Create", name)
	}
	if err := Create(name); err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if err := Delete(name); err != nil {
		t.Fatal(err)
	}
	if Exists(name) {
		t.Fatalf("%s still exists after Delete", name)
	}
	if err := Delete(name); err != nil {
		t.Fatalf("Delete of a missing namespace: %v", err)
	}
}

func TestDoEntersAndReturns(t *testing.T) {
	name := testNS(t)
	self := func() string { return fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()) }
	origin := inode(t, "/proc/self/ns/net")
	var inside uint64
	err := Do(Path(name), func() error { inside = inode(t, self()); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := inode(t, Path(name)); inside != want {
		t.Errorf("inside Do the thread is in namespace %d, want %d", inside, want)
	}
	// Every thread this goroutine may land on must be back in the origin.
	for i := 0; i < 20; i++ {
		if got := inode(t, self()); got != origin {
			t.Fatalf("after Do a thread is in namespace %d, want %d", got, origin)
		}
	}
}

func TestDoErrors(t *testing.T) {
	name := testNS(t)
	boom := errors.New("boom")
	if err := Do(Path(name), func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Do returned %v, want the function's error", err)
	}
	if err := Do("/run/netns/does-not-exist-ff", func() error { return nil }); err == nil {
		t.Error("Do into a missing namespace succeeded")
	}
}

// TestDialReachesNamespaceOnlyAddress serves on an address that exists only
// inside a namespace and reaches it from this (root) namespace through Dial.
func TestDialReachesNamespaceOnlyAddress(t *testing.T) {
	name := testNS(t)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"}, // local delivery goes through lo
		{"link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"addr", "add", "10.123.45.1/32", "dev", "v0"},
		{"link", "set", "v0", "up"},
	} {
		if err := ip(append([]string{"-n", name}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Listen(Path(name), "tcp", "10.123.45.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Write([]byte("hello"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, Path(name), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v; want hello", got, err)
	}
}

func TestCommandRunsInNamespace(t *testing.T) {
	name := testNS(t)
	out, err := Command(Path(name), "readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]\n", inode(t, Path(name)))
	if string(out) != want {
		t.Errorf("command ran in %q, want %q", out, want)
	}
}

func TestList(t *testing.T) {
	name := testNS(t)
	got, err := List(name)
	if err != nil || len(got) != 1 || got[0] != name {
		t.Errorf("List(%q) = %v, %v", name, got, err)
	}
}
