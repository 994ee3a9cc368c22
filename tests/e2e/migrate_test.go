package e2e

import (
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestMigrate: a redis-server started without the library moves from h1
// to h2 and back while three clients (on its home host with and without
// the library, and across hosts) each hold one connection and INCR a key
// of their own every 2 ms: every reply is the one before plus 1, none
// fails; the value written before is there after; it runs on h2 with its
// IP, and nothing of the move is left once it is removed.
func TestMigrate(t *testing.T) {
	if m := testenv.Missing("redis-server", "redis-cli", "criu", "python3"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	srv := "mredis"
	c.StartDetached(t, "h1", srv, []string{"--no-freeflow"}, "redis-server", "--port", "6379", "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--appendonly", "no")
	c.WaitListening(t, srv, 6379)
	ip := containerOf(t, c, srv).IP
	value := hex.EncodeToString(randomBytes(4 << 10))
	runClient(t, c, "h2", nil, "redis-cli", "-h", srv, "SET", "before", value)

	incr, err := filepath.Abs("testdata/migrate/incr.py")
	must(t, err, "find incr.py")
	script := volume(incr, "/run/incr.py")
	clients := []struct{ name, host string }{{"mc1", "h1"}, {"mc2", "h1"}, {"mc3", "h2"}}
	for i, cl := range clients {
		flags := script
		if i == 1 {
			flags = append([]string{"--no-freeflow"}, script...)
		}
		c.StartDetached(t, cl.host, cl.name, flags, "python3", "/run/incr.py", srv, "key-"+cl.name, "6")
	}

	time.Sleep(1500 * time.Millisecond)
	if out := c.MustFF(t, "migrate", srv, "--to", "h2"); !strings.Contains(out, "moved from h1 to h2") {
		t.Fatalf("migrate printed %q", out)
	}
	if got := containerOf(t, c, srv); got.Host != "h2" || got.IP != ip || got.Status != "running" {
		t.Fatalf("after migrate --to h2, ps shows %+v; want it running on h2 with IP %s", got, ip)
	}

	t.Run("hosts_file_stays_read_only", func(t *testing.T) {
		r := c.FF(t, "exec", srv, "--", "sh", "-c", "echo 10.0.0.1 evil >>/etc/hosts")
		if r.Code == 0 || !strings.Contains(r.Stderr, "Read-only") {
			t.Fatalf("a migrated container could write the cluster's /etc/hosts: exit %d %s", r.Code, r.Stderr)
		}
	})

	time.Sleep(1500 * time.Millisecond)
	c.MustFF(t, "migrate", srv, "--to", "h1")

	for _, cl := range clients {
		testenv.WaitFor(t, cl.name+" to finish", func() bool { return containerOf(t, c, cl.name).Status == "exited" })
		if out := c.MustFF(t, "logs", cl.name); !strings.HasPrefix(out, "OK ") {
			t.Errorf("client %s on %s across both moves: %s", cl.name, cl.host, out)
		} else {
			t.Logf("client %s on %s: %s", cl.name, cl.host, strings.TrimSpace(out))
		}
	}
	for _, h := range []string{"h1", "h2"} {
		if out := runClient(t, c, h, nil, "redis-cli", "-h", srv, "--raw", "GET", "before").Stdout; out != value+"\n" {
			t.Errorf("GET from %s after the moves: %d bytes, not the %d-byte value written before", h, len(out), len(value))
		}
	}

	t.Run("removed_leaves_no_route", func(t *testing.T) {
		c.MustFF(t, "migrate", srv, "--to", "h2")
		c.MustFF(t, "rm", "-f", srv)
		for _, h := range []string{"h1", "h2"} {
			ns := c.Name + "-" + h
			for _, args := range [][]string{{"route", "show", ip + "/32"}, {"neigh", "show", "proxy", ip}} {
				out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("ip -n %s %s after rm: %q %v", ns, strings.Join(args, " "), out, err)
				}
			}
		}
		if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), c.Name+"-m-") ||
			strings.Contains(string(out), c.Name+"-c-"+srv) {
			t.Errorf("network namespaces left after rm:\n%s", out)
		}
	})
}

// TestMigrateRefused: a migration that cannot be done safely says why and
// changes nothing: a container with the library (its fast paths are not
// parked yet), an unknown host, the host it is on; --dry-run moves nothing.
func TestMigrateRefused(t *testing.T) {
	if m := testenv.Missing("criu"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "withlib", nil, "sleep", "3600")
	c.StartDetached(t, "h1", "nolib", []string{"--no-freeflow"}, "sleep", "3600")
	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{"withlib", "--to", "h2"}, "FreeFlow library"},
		{[]string{"nolib", "--to", "h9"}, "unknown host"},
		{[]string{"nolib", "--to", "h1"}, "already runs on h1"},
		{[]string{"nolib"}, "usage"},
	} {
		r := c.FF(t, append([]string{"migrate"}, tc.args...)...)
		if r.Code == 0 || !strings.Contains(r.Stderr, tc.why) {
			t.Errorf("migrate %s: exit %d, stderr %q; want a refusal saying %q", strings.Join(tc.args, " "), r.Code, r.Stderr, tc.why)
		}
	}
	if out := c.MustFF(t, "migrate", "nolib", "--to", "h2", "--dry-run"); !strings.Contains(out, "can migrate from h1 to h2") {
		t.Errorf("--dry-run printed %q", out)
	}
	for _, n := range []string{"withlib", "nolib"} {
		if got := containerOf(t, c, n); got.Host != "h1" || got.Status != "running" {
			t.Errorf("after the refusals %s is %+v; want it running on h1", n, got)
		}
	}
}

type psLine struct {
	Name, Host, IP, Status string
}

// containerOf is container name's line of `freeflow ps`.
func containerOf(t *testing.T, c *testenv.Cluster, name string) psLine {
	t.Helper()
	var list []psLine
	must(t, json.Unmarshal([]byte(c.MustFF(t, "ps", "-o", "json")), &list), "parse ps -o json")
	for _, l := range list {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no container %s in ps", name)
	return psLine{}
}
