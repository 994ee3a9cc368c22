package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
)

func TestFlagErrors(t *testing.T) {
	good := []string{"--cluster", "t1", "--host", "h1", "--fabric-ip", "10.99.0.2", "--subnet", "10.244.1.0/24", "--etcd", "http://127.0.0.1:2379"}
	if o, err := parseFlags(good); err != nil || o.agent.AdminSocket != "/run/freeflow/t1/hosts/h1/admin.sock" || !o.agent.FabricGuard {
		t.Fatalf("good flags: %+v, %v", o, err)
	}
	for bad, says := range map[string]string{
		"--host=":               "--host is required",
		"--fabric-ip=10.99":     "--fabric-ip",
		"--subnet=10.244.1.0":   "--subnet",
		"--etcd=":               "--etcd is required",
		"--etcd=127.0.0.1:2379": "not an etcd client URL",
		"--cluster=Bad_Name":    "invalid cluster name",
	} {
		_, err := parseFlags(append(append([]string{}, good...), bad))
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: error %v, want one saying %q", bad, err, says)
		}
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startEtcd runs Debian's etcd on loopback ports until the test ends.
func startEtcd(t *testing.T) string {
	client, peer := "http://127.0.0.1:"+freePort(t), "http://127.0.0.1:"+freePort(t)
	cmd := exec.Command("etcd", "--name", "t", "--data-dir", filepath.Join(t.TempDir(), "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return client
}

// The real daemon with a real etcd: it registers a container in a real
// network namespace, reports a connected directory, and removes its
// sockets on SIGTERM.
func TestDaemonWithEtcd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	for _, bin := range []string{"etcd", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "freeflowd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}
	ns := "fft" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	admin := filepath.Join(tmp, "admin.sock")
	// The daemon runs in the root namespace here, where it must install no
	// iptables rules.
	d := exec.Command(bin, "--cluster", "t"+ns[3:8], "--host", "h1", "--fabric-ip", "10.99.0.2", "--subnet", "10.244.1.0/24",
		"--etcd", startEtcd(t), "--sock-dir", filepath.Join(tmp, "sock"), "--admin-socket", admin, "--log", filepath.Join(tmp, "log"),
		"--fabric-guard=false")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	c := dialAdmin(t, admin)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctr := directory.Container{ID: "c1", Name: "web", Host: "h1", IP: "10.244.1.2", NetNS: "/run/netns/" + ns}
	if err := c.Register(ctx, ctr); err != nil {
		t.Fatal(err)
	}
	waitListed(t, c, "c1")
	st := waitConnected(t, c)
	if st.LocalContainers != 1 || st.ContainersPerHost["h1"] != 1 || st.Host != "h1" {
		t.Errorf("STATUS = %+v", st)
	}
	d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Errorf("freeflowd exit after SIGTERM: %v", err)
	}
	for _, p := range []string{admin, filepath.Join(tmp, "sock", "agent.sock")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after SIGTERM (%v)", p, err)
		}
	}
}

func dialAdmin(t *testing.T, path string) *agentapi.AdminClient {
	for i := 0; ; i++ {
		c, err := agentapi.DialAdmin(path)
		if err == nil {
			return c
		}
		if i == 100 {
			t.Fatalf("freeflowd did not come up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitConnected waits for STATUS to report a live directory.
func waitConnected(t *testing.T, c *agentapi.AdminClient) agentapi.Status {
	var st agentapi.Status
	var err error
	for i := 0; i < 100; i++ {
		if st, err = c.Status(context.Background()); err == nil && st.Directory.Connected {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("STATUS never reported a connected directory: %+v, %v", st, err)
	return st
}

// waitListed waits for the watch to bring id into the agent's cache.
func waitListed(t *testing.T, c *agentapi.AdminClient, id string) {
	for i := 0; i < 100; i++ {
		cs, err := c.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range cs {
			if x.ID == id {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s never appeared in LIST", id)
}
