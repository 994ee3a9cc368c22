package container_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/directory/etcd"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// cnitool runs cnitool in host h's namespace against the generated
// configuration list, as any CNI runtime would.
func cnitool(t *testing.T, l state.Layout, h, cmd, nsPath, name string) (string, error) {
	t.Helper()
	c := netns.Command(state.NetNSPath(l.HostNetNS(h)), "cnitool", cmd, cni.NetworkName, nsPath)
	c.Env = append(os.Environ(),
		"NETCONFPATH="+l.CNIConfDir(h),
		"CNI_PATH="+binDir+":"+cni.SystemPluginDir,
		"CNI_ARGS=IgnoreUnknown=1;FF_NAME="+name+";FF_TENANT=green;FF_FREEFLOW=false")
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		return out.String(), &cniToolError{cmd: cmd, err: err, stderr: errb.String()}
	}
	return out.String(), nil
}

type cniToolError struct {
	cmd    string
	err    error
	stderr string
}

func (e *cniToolError) Error() string {
	return "cnitool " + e.cmd + ": " + e.err.Error() + ": " + e.stderr
}

// etcdRecords returns the container records in etcd, read with etcdctl
// from host h's namespace.
func etcdRecords(t *testing.T, l state.Layout, h string) []directory.Container {
	t.Helper()
	c := netns.Command(state.NetNSPath(l.HostNetNS(h)), "etcdctl", "--endpoints", "http://"+state.FabricEtcd+":2379",
		"get", "--prefix", "--print-value-only", etcd.Prefix(l.Cluster)+"containers/")
	c.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := c.Output()
	if err != nil {
		t.Fatalf("etcdctl get: %v", err)
	}
	var recs []directory.Container
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r directory.Container
		if line != "" && json.Unmarshal([]byte(line), &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

func byName(recs []directory.Container, name string) *directory.Container {
	return find(recs, func(r directory.Container) bool { return r.Name == name })
}

func TestCNIToolAddCheckDel(t *testing.T) {
	l := needCluster(t)
	cl, err := l.LoadCluster()
	if err != nil {
		t.Fatal(err)
	}
	h1, _ := cl.Host("h1")
	if err := cni.WriteConfList(l, *h1); err != nil {
		t.Fatal(err)
	}
	removeCacheLater(t)
	name := testenv.RandomName("k", 5)
	ns := l.ContainerNetNS(name) // carries the cluster's prefix, so `cluster down` would find a leftover
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	t.Cleanup(func() { cnitool(t, l, "h1", "del", state.NetNSPath(ns), name) })

	out, err := cnitool(t, l, "h1", "add", state.NetNSPath(ns), name)
	if err != nil {
		t.Fatal(err)
	}
	rec := byName(etcdRecords(t, l, "h1"), name)
	if rec == nil || rec.Host != "h1" || rec.Tenant != "green" || rec.FreeFlow || rec.NetNS != state.NetNSPath(ns) ||
		!strings.Contains(out, `"`+rec.IP+`/24"`) {
		t.Fatalf("etcd record after cnitool add: %+v\nadd result: %s", rec, out)
	}
	waitFor(t, "the agent to list "+name, func() bool { return registered(t, l, "h1", rec.ID) })
	if _, err := cnitool(t, l, "h1", "check", state.NetNSPath(ns), name); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := cnitool(t, l, "h1", "del", state.NetNSPath(ns), name); err != nil {
			t.Fatalf("del #%d: %v", i, err)
		}
	}
	if rec := byName(etcdRecords(t, l, "h1"), name); rec != nil {
		t.Fatalf("etcd still has %+v after cnitool del", rec)
	}
	waitFor(t, "the agent to drop "+name, func() bool { return !registered(t, l, "h1", rec.ID) })
}

// cnitoolCache is where cnitool keeps results (libcni's default); it
// cannot be moved, so the test removes it afterwards if it made it.
const cnitoolCache = "/var/lib/cni"

func removeCacheLater(t *testing.T) {
	if _, err := os.Stat(cnitoolCache); err == nil {
		return
	}
	t.Cleanup(func() {
		os.Remove(cnitoolCache + "/results") // only when empty: never another user's results
		os.Remove(cnitoolCache)
	})
}

// TestCNIErrorJSON checks that a failing plugin answers with a CNI error
// that names the agent socket.
func TestCNIErrorJSON(t *testing.T) {
	needCluster(t)
	conf := `{"cniVersion":"1.0.0","name":"x","type":"freeflow-cni","agentSocket":"/nonexistent/admin.sock","host":"h1"}`
	c := exec.Command(binDir + "/freeflow-cni")
	c.Env = []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=x", "CNI_NETNS=/nonexistent", "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
	c.Stdin = strings.NewReader(conf)
	out, err := c.Output()
	if err == nil {
		t.Fatal("DEL with the agent down succeeded")
	}
	var e struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	}
	if json.Unmarshal(out, &e) != nil || e.Code != 11 || !strings.Contains(e.Msg, "/nonexistent/admin.sock; the agent may be down") {
		t.Fatalf("error output %s", out)
	}
	c = exec.Command(binDir + "/freeflow-cni")
	c.Env = []string{"CNI_COMMAND=VERSION"}
	c.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	if out, err = c.Output(); err != nil || !strings.Contains(string(out), `"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]`) {
		t.Fatalf("VERSION: %v %s", err, out)
	}
}
