package directory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// etcdCluster is a real etcd cluster of /usr/bin/etcd processes on loopback
// with data in a test temp dir; every process is killed in t.Cleanup.
type etcdCluster struct {
	t       *testing.T
	members []*etcdMember
}

type etcdMember struct {
	cfg EtcdConfig
	cmd *exec.Cmd
}

func startEtcd(t *testing.T, n int) *etcdCluster {
	t.Helper()
	if _, err := os.Stat(EtcdBinary); err != nil {
		t.Skipf("skipping: needs a real etcd at %s (Debian package etcd-server): %v", EtcdBinary, err)
	}
	dir := t.TempDir()
	ports := freePorts(t, 2*n)
	c := &etcdCluster{t: t}
	var initial []string
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		cfg := EtcdConfig{
			Name:      name,
			DataDir:   filepath.Join(dir, name),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Token:     "tok-" + randomName(),
			LogFile:   filepath.Join(dir, name+".log"),
		}
		initial = append(initial, name+"="+cfg.PeerURL)
		c.members = append(c.members, &etcdMember{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		m.cfg.Token = c.members[0].cfg.Token
	}
	t.Cleanup(c.stopAll)
	for i := range c.members {
		c.start(i)
	}
	for i := range c.members {
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

func (c *etcdCluster) start(i int) {
	c.t.Helper()
	args := EtcdArgs(c.members[i].cfg)
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd member %d: %v", i, err)
	}
	c.members[i].cmd = cmd
}

func (c *etcdCluster) waitHealthy(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WaitHealthy(ctx, c.members[i].cfg.ClientURL, nil); err != nil {
		c.t.Fatalf("etcd member %d: %v", i, err)
	}
}

// kill SIGKILLs member i and reaps it.
func (c *etcdCluster) kill(i int) {
	m := c.members[i]
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	_ = m.cmd.Wait()
	m.cmd = nil
}

// restart starts member i again on its data dir and waits until healthy.
func (c *etcdCluster) restart(i int) {
	c.t.Helper()
	c.start(i)
	c.waitHealthy(i)
}

func (c *etcdCluster) stopAll() {
	for i, m := range c.members {
		c.kill(i)
		if c.t.Failed() {
			if log, err := os.ReadFile(m.cfg.LogFile); err == nil {
				c.t.Logf("etcd %s log:\n%s", m.cfg.Name, log)
			}
		}
	}
}

func (c *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.cfg.ClientURL)
	}
	return eps
}

// randomName is "t" plus 4 lowercase letters or digits: unique cluster
// names keep parallel runs on one etcd apart.
func randomName() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte{'t'}
	for range 4 {
		b = append(b, chars[rand.IntN(len(chars))])
	}
	return string(b)
}
