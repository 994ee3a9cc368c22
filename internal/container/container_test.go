package container_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/container"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// probeScript reports, one key=value per line, what a container sees.
const probeScript = `echo pid=$$
echo hostname=$(hostname)
for n in ipc uts mnt pid net; do echo ns-$n=$(readlink /proc/self/ns/$n); done
touch /probe 2>/dev/null && echo root=rw || echo root=ro
test -S /run/freeflow/agent.sock && echo agent=yes || echo agent=no
test -e /run/freeflow/$CLUSTER/cluster.json && echo state=visible || echo state=hidden
test -e /tmp/$MARK && echo tmp=shared || echo tmp=private
test -e /dev/shm/$MARK && echo shm=shared || echo shm=private
test -e /tmp/host-$MARK && echo hosttmp=visible || echo hosttmp=hidden
echo env=$GREETING`

func parseProbe(out string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

func TestContainerIsolation(t *testing.T) {
	needCluster(t)
	mark := testenv.RandomName("m", 6)
	hostFile := "/tmp/host-" + mark
	if err := os.WriteFile(hostFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hostFile) })

	// Container a writes the marker into its /tmp and /dev/shm.
	a := testenv.RandomName("a", 5)
	startDetached(t, "h1", a, "sh", "-c", "touch /tmp/"+mark+" /dev/shm/"+mark+"; exec sleep 1000")
	waitFor(t, "marker in "+a, func() bool { return ff(t, "exec", a, "--", "test", "-e", "/dev/shm/"+mark).Code == 0 })

	b := testenv.RandomName("b", 5)
	out := mustFF(t, "run", "--host", "h1", "--name", b, "--rm", "--env", "CLUSTER="+tc.Name, "--env", "MARK="+mark,
		"--env", "GREETING=hi", "--", "sh", "-c", probeScript)
	got := parseProbe(out)
	want := map[string]string{"pid": "1", "hostname": b, "root": "ro", "agent": "yes", "state": "hidden",
		"tmp": "private", "shm": "private", "hosttmp": "hidden", "env": "hi"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("inside %s: %s=%q, want %q\n%s", b, k, got[k], v, out)
		}
	}
	for _, n := range []string{"ipc", "uts", "mnt", "pid", "net"} {
		host, _ := os.Readlink("/proc/self/ns/" + n)
		if got["ns-"+n] == "" || got["ns-"+n] == host {
			t.Errorf("%s namespace of %s is %q, the host's is %q: want its own", n, b, got["ns-"+n], host)
		}
		other := strings.TrimSpace(mustFF(t, "exec", a, "--", "readlink", "/proc/self/ns/"+n))
		if other == got["ns-"+n] {
			t.Errorf("%s and %s share the %s namespace %s", a, b, n, other)
		}
	}
	if _, err := os.Stat("/tmp/" + mark); err == nil {
		t.Errorf("%s's /tmp file appeared in the host's /tmp", a)
	}
	if pid1 := strings.TrimSpace(mustFF(t, "exec", a, "--", "cat", "/proc/1/comm")); pid1 != "sleep" {
		t.Errorf("pid 1 of %s is %q, want its own process (sleep)", a, pid1)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) { t.Helper(); testenv.WaitFor(t, what, ok) }

func TestExitCodes(t *testing.T) {
	needCluster(t)
	name := testenv.RandomName("x", 5)
	if r := ff(t, "run", "--host", "h2", "--name", name, "--rm", "--", "sh", "-c", "echo out; exit 7"); r.Code != 7 || r.Stdout != "out\n" {
		t.Fatalf("run exit 7: got exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if info := psEntry(t, name); info != nil {
		t.Fatalf("--rm left %+v", *info)
	}
	d := testenv.RandomName("e", 5)
	startDetached(t, "h2", d, "sleep", "1000")
	if r := ff(t, "exec", d, "--", "sh", "-c", "exit 5"); r.Code != 5 {
		t.Fatalf("exec exit 5: got %d (%s)", r.Code, r.Stderr)
	}
	// A detached container's output goes to its log; once it exits, ps says so.
	l := testenv.RandomName("l", 5)
	startDetached(t, "h1", l, "sh", "-c", "echo hello; exit 3")
	waitFor(t, l+" to exit", func() bool { info := psEntry(t, l); return info != nil && info.Status == "exited" })
	if out := mustFF(t, "logs", l); out != "hello\n" {
		t.Fatalf("logs %s: %q", l, out)
	}
}

// psEntry returns the ps -o json line of name, or nil.
func psEntry(t *testing.T, name string) *container.Info {
	t.Helper()
	var list []container.Info
	if err := json.Unmarshal([]byte(mustFF(t, "ps", "-o", "json")), &list); err != nil {
		t.Fatalf("ps -o json: %v", err)
	}
	return find(list, func(c container.Info) bool { return c.Name == name })
}

func TestRemove(t *testing.T) {
	l := needCluster(t)
	name := testenv.RandomName("r", 5)
	startDetached(t, "h1", name, "sleep", "1000")
	info := psEntry(t, name)
	if info == nil || info.Status != "running" || info.Host != "h1" || info.Tenant != "default" || info.PID <= 0 ||
		!strings.HasPrefix(info.IP, "10.244.1.") {
		t.Fatalf("ps after run: %+v", info)
	}
	if !strings.Contains(mustFF(t, "ps"), name) {
		t.Fatal("ps table does not list the container")
	}
	hosts, _ := os.ReadFile(l.HostsFile())
	if !strings.Contains(string(hosts), info.IP+"\t"+name+"\n") {
		t.Fatalf("hosts file lacks %s:\n%s", name, hosts)
	}
	if !registered(t, l, "h1", l.Cluster+"-"+name) {
		t.Fatal("the agent does not list the container")
	}
	if r := ff(t, "rm", name); r.Code == 0 || !strings.Contains(r.Stderr, "rm -f") {
		t.Fatalf("rm of a running container: exit %d, stderr %q; want an error pointing to rm -f", r.Code, r.Stderr)
	}
	mustFF(t, "rm", "-f", name)
	assertGone(t, l, name, "h1")
	if r := ff(t, "rm", "-f", name); r.Code == 0 {
		t.Fatal("rm of a removed container succeeded")
	}
}

// assertGone checks that nothing of container name is left.
func assertGone(t *testing.T, l state.Layout, name, host string) {
	t.Helper()
	if netns.Exists(l.ContainerNetNS(name)) {
		t.Errorf("network namespace %s left", l.ContainerNetNS(name))
	}
	if _, err := os.Stat(l.ContainerDir(name)); err == nil {
		t.Errorf("container directory %s left", l.ContainerDir(name))
	}
	if _, err := os.Stat(filepath.Join(l.CrunRoot(), l.Cluster+"-"+name)); err == nil {
		t.Errorf("crun state of %s left", name)
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids/" + l.Cluster + "-" + name); err == nil {
		t.Errorf("cgroup of %s left", name)
	}
	if hosts, _ := os.ReadFile(l.HostsFile()); strings.Contains(string(hosts), "\t"+name+"\n") {
		t.Errorf("hosts file still lists %s", name)
	}
	if psEntry(t, name) != nil {
		t.Errorf("ps still lists %s", name)
	}
	if registered(t, l, host, l.Cluster+"-"+name) {
		t.Errorf("the agent still lists %s", name)
	}
}

// registered asks host's agent whether container id is in the directory.
func registered(t *testing.T, l state.Layout, host, id string) bool {
	t.Helper()
	return findRegistered(t, l, host, func(c directory.Container) bool { return c.ID == id }) != nil
}

func findRegistered(t *testing.T, l state.Layout, host string, match func(directory.Container) bool) *directory.Container {
	t.Helper()
	c, err := agentapi.DialAdmin(l.AdminSocket(host))
	if err != nil {
		t.Fatalf("dial agent of %s: %v", host, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatalf("list containers on %s: %v", host, err)
	}
	return find(list, match)
}

func TestErrors(t *testing.T) {
	l := needCluster(t)
	name := testenv.RandomName("d", 5)
	startDetached(t, "h1", name, "sleep", "1000")
	r := ff(t, "run", "--host", "h2", "--name", name, "-d", "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "container "+name+" already exists on h1") {
		t.Errorf("duplicate name: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if info := psEntry(t, name); info == nil || info.Status != "running" {
		t.Errorf("the failed duplicate run disturbed the first container: %+v", info)
	}
	other := testenv.RandomName("u", 5)
	r = ff(t, "run", "--host", "h9", "--name", other, "--", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, `unknown host "h9"`) {
		t.Errorf("unknown host: exit %d, stderr %q", r.Code, r.Stderr)
	}
	assertGone(t, l, other, "h1")
	// crun fails after the network is attached: everything is rolled back.
	r = ff(t, "run", "--host", "h2", "--name", other, "-d", "--", "/no/such/program")
	if r.Code == 0 || !strings.Contains(r.Stderr, "/no/such/program") {
		t.Errorf("missing program: exit %d, stderr %q", r.Code, r.Stderr)
	}
	assertGone(t, l, other, "h2")
	if r := ff(t, "--cluster", "nosuch", "ps"); r.Code == 0 || !strings.Contains(r.Stderr, "cluster up") {
		t.Errorf("ps on a missing cluster: exit %d, stderr %q", r.Code, r.Stderr)
	}
}
