package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/etcdproc"
)

// EtcdCluster is a real etcd cluster of etcdproc.Binary processes on
// loopback, with data in a test temp dir; every process is killed in
// t.Cleanup.
type EtcdCluster struct {
	t       *testing.T
	Members []*EtcdMember
}

// EtcdMember is one member process.
type EtcdMember struct {
	Config etcdproc.Config
	cmd    *exec.Cmd
}

// StartEtcd starts an n-member etcd cluster and waits until every member is
// healthy; it skips the test if etcd is not installed.
func StartEtcd(t *testing.T, n int) *EtcdCluster {
	t.Helper()
	if _, err := os.Stat(etcdproc.Binary); err != nil {
		t.Skipf("needs a real etcd at %s (Debian package etcd-server): %v", etcdproc.Binary, err)
	}
	dir := t.TempDir()
	ports := freePorts(t, 2*n)
	c := &EtcdCluster{t: t}
	token := RandomName("tok", 6)
	var initial []string
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		cfg := etcdproc.Config{
			Name:      name,
			DataDir:   filepath.Join(dir, name),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Token:     token,
			LogFile:   filepath.Join(dir, name+".log"),
		}
		initial = append(initial, name+"="+cfg.PeerURL)
		c.Members = append(c.Members, &EtcdMember{Config: cfg})
	}
	for _, m := range c.Members {
		m.Config.InitialCluster = strings.Join(initial, ",")
	}
	t.Cleanup(c.stopAll)
	for i := range c.Members {
		c.start(i)
	}
	for i := range c.Members {
		c.waitHealthy(i)
	}
	return c
}

// freePorts picks n distinct free loopback ports by binding to port 0.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

func (c *EtcdCluster) start(i int) {
	c.t.Helper()
	args := etcdproc.Args(c.Members[i].Config)
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd member %d: %v", i, err)
	}
	c.Members[i].cmd = cmd
}

func (c *EtcdCluster) waitHealthy(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := etcdproc.WaitHealthy(ctx, c.Members[i].Config.ClientURL, nil); err != nil {
		c.t.Fatalf("etcd member %d: %v", i, err)
	}
}

// Running reports whether the member's process runs (it was not killed).
func (m *EtcdMember) Running() bool { return m.cmd != nil }

// Kill SIGKILLs member i and reaps it.
func (c *EtcdCluster) Kill(i int) {
	m := c.Members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.cmd = nil
}

// Restart starts member i again on its data dir and waits until healthy.
func (c *EtcdCluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
	c.waitHealthy(i)
}

func (c *EtcdCluster) stopAll() {
	for i, m := range c.Members {
		c.Kill(i)
		if c.t.Failed() {
			if log, err := os.ReadFile(m.Config.LogFile); err == nil {
				c.t.Logf("etcd %s log:\n%s", m.Config.Name, log)
			}
		}
	}
}

// Endpoints lists every member's client URL.
func (c *EtcdCluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Config.ClientURL)
	}
	return eps
}
