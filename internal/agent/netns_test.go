package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// container returns a record for a container in the named netns.
func container(id, name, ip, ns string) directory.Container {
	return directory.Container{ID: id, Name: name, Host: testHost, IP: ip, Tenant: "blue", NetNS: "/run/netns/" + ns}
}

func adminClient(t *testing.T, a *testAgent) *agentapi.AdminClient {
	t.Helper()
	c, err := agentapi.DialAdmin(a.cfg.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A separate process inside a registered container's namespace gets that
// container's identity in HELLO_REPLY; one in an unregistered namespace is
// DENIED.
func TestHelloFromContainerNetns(t *testing.T) {
	nsA, nsX := makeNetns(t), makeNetns(t)
	a := startAgent(t, newFakeDir(), nil)
	if err := adminClient(t, a).Register(ctxT(t), container("ca", "web", "10.244.1.2", nsA)); err != nil {
		t.Fatal(err)
	}
	if got := runInNetns(t, nsA, "hello", a, nil)["hello"]; got != "ok ca" {
		t.Errorf("HELLO from container ca's namespace: %s, want ok ca", got)
	}
	if got := runInNetns(t, nsX, "hello", a, nil)["hello"]; got != "DENIED" {
		t.Errorf("HELLO from an unregistered namespace: %s, want DENIED", got)
	}
}

// A process in container A cannot act as container B: its HELLO claims are
// ignored, admin requests on the library socket are DENIED, and the admin
// socket refuses it too.
func TestImpersonationRefused(t *testing.T) {
	nsA, nsB := makeNetns(t), makeNetns(t)
	a := startAgent(t, newFakeDir(), nil)
	admin := adminClient(t, a)
	ca, cb := container("ca", "web", "10.244.1.2", nsA), container("cb", "db", "10.244.1.3", nsB)
	for _, c := range []directory.Container{ca, cb} {
		if err := admin.Register(ctxT(t), c); err != nil {
			t.Fatal(err)
		}
	}
	victim := cb
	victim.NetNS = ca.NetNS // "B lives in my namespace"
	res := runInNetns(t, nsA, "impersonate", a, &victim)
	want := childResult{"hello": "ok ca", "register": "DENIED", "unregister": "DENIED",
		"list": "DENIED", "status": "DENIED", "admin": "DENIED"}
	for step, w := range want {
		if res[step] != w {
			t.Errorf("%s from container A: %s, want %s", step, res[step], w)
		}
	}
	cs, err := admin.List(ctxT(t))
	if err != nil || len(cs) != 2 {
		t.Fatalf("after the attempt: %v, %v", cs, err)
	}
	for _, c := range cs {
		if c.ID == "cb" && c.NetNS != cb.NetNS {
			t.Errorf("container B was changed: %+v", c)
		}
	}
	if got := runInNetns(t, nsB, "hello", a, nil)["hello"]; got != "ok cb" {
		t.Errorf("container B's own HELLO: %s", got)
	}
}

// A restarted agent recognises containers registered before, from the
// directory alone.
func TestRestartedAgentRecognisesContainers(t *testing.T) {
	ns := makeNetns(t)
	dir := newFakeDir()
	first := startAgent(t, dir, nil)
	if err := adminClient(t, first).Register(ctxT(t), container("ca", "web", "10.244.1.2", ns)); err != nil {
		t.Fatal(err)
	}
	second := startAgent(t, dir, nil) // a new agent with only the directory
	if got := runInNetns(t, ns, "hello", second, nil)["hello"]; got != "ok ca" {
		t.Errorf("HELLO to a restarted agent: %s, want ok ca", got)
	}
}

func TestRegisterValidation(t *testing.T) {
	ns, ns2 := makeNetns(t), makeNetns(t)
	a := startAgent(t, newFakeDir(remoteContainer), nil)
	admin := adminClient(t, a)
	good := container("ca", "web", "10.244.1.2", ns)
	if err := admin.Register(ctxT(t), good); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(file, nil, 0o644)
	cases := map[string]struct {
		mod  func(*directory.Container)
		code protocol.Code
		says string
	}{
		"id with slash":     {func(c *directory.Container) { c.ID = "a/b" }, protocol.CodeInvalid, "container id"},
		"empty name":        {func(c *directory.Container) { c.Name = "" }, protocol.CodeInvalid, "container name"},
		"name, two slashes": {func(c *directory.Container) { c.Name = "ns/pod/x" }, protocol.CodeInvalid, "namespace/name"},
		"pod name empty":    {func(c *directory.Container) { c.Name = "ns/" }, protocol.CodeInvalid, "namespace/name"},
		"IP outside subnet": {func(c *directory.Container) { c.IP = "10.244.2.7" }, protocol.CodeInvalid, "subnet 10.244.1.0/24"},
		"IP not an IP":      {func(c *directory.Container) { c.IP = "web" }, protocol.CodeInvalid, "subnet"},
		"other host":        {func(c *directory.Container) { c.Host = "h2" }, protocol.CodeInvalid, "serves host h1"},
		"missing netns":     {func(c *directory.Container) { c.NetNS = "/run/netns/nope-" + randName(6) }, protocol.CodeInvalid, "no such file"},
		"plain file":        {func(c *directory.Container) { c.NetNS = file }, protocol.CodeInvalid, "not a namespace"},
		"ipc namespace":     {func(c *directory.Container) { c.NetNS = "/proc/self/ns/ipc" }, protocol.CodeInvalid, "not a network namespace"},
		"host's namespace":  {func(c *directory.Container) { c.NetNS = "/proc/self/ns/net" }, protocol.CodeInvalid, "own network namespace"},
		"duplicate name":    {func(c *directory.Container) { c.Name = "db" }, protocol.CodeInvalid, `"db" is already used by container remote0`},
		"namespace taken":   {func(c *directory.Container) {}, protocol.CodeInvalid, "already belongs to container ca"},
	}
	for name, tc := range cases {
		c := container("cz", "other", "10.244.1.20", ns2)
		if name == "namespace taken" {
			c.NetNS = good.NetNS
		}
		tc.mod(&c)
		err := admin.Register(ctxT(t), c)
		wantCode(t, err, tc.code)
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %q does not say %q", name, err, tc.says)
		}
	}
	a.dir.setFailWrites(true)
	wantCode(t, admin.Register(ctxT(t), container("cz", "other", "10.244.1.20", ns2)), protocol.CodeUnavailable)
	wantCode(t, admin.Unregister(ctxT(t), "ca"), protocol.CodeUnavailable)
	a.dir.setFailWrites(false)
}

// A pod registered by the CNI plugin under its namespace/name keeps the
// record the directory stored, whose tenant the Kubernetes datastore takes
// from the pod: the agent identifies the pod's callers with that tenant,
// as every other agent sees it.
func TestRegisterPodTakesStoredRecord(t *testing.T) {
	ns := makeNetns(t)
	dir := newFakeDir()
	dir.stampTenant = "team-a"
	a := startAgent(t, dir, nil)
	pod := container("sandbox1", "team-a/web-0", "10.244.1.2", ns)
	if err := adminClient(t, a).Register(ctxT(t), pod); err != nil {
		t.Fatal(err)
	}
	if c, _, ok := a.ids.local("sandbox1"); !ok || c.Name != "team-a/web-0" || c.Tenant != "team-a" {
		t.Errorf("local identity = %+v, %v; want team-a/web-0 of tenant team-a, as stored (it registered as blue)", c, ok)
	}
}

func TestAdminRegisterListStatusUnregister(t *testing.T) {
	ns := makeNetns(t)
	a := startAgent(t, newFakeDir(remoteContainer), nil)
	admin := adminClient(t, a)
	c := container("ca", "web", "10.244.1.2", ns)
	ctx := ctxT(t)
	for i := 0; i < 2; i++ { // registering again updates, it is no error
		if err := admin.Register(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := admin.List(ctx)
	if err != nil || len(cs) != 2 || cs[0].ID != "ca" || cs[0].Created.IsZero() {
		t.Fatalf("LIST = %+v, %v", cs, err)
	}
	st, err := admin.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Host != testHost || st.Cluster != a.cfg.Cluster || st.PID != os.Getpid() || st.AgentVersion != agentapi.Version ||
		st.LocalContainers != 1 || st.Containers != 2 || st.ContainersPerHost["h2"] != 1 || !st.Directory.Connected {
		t.Errorf("STATUS = %+v", st)
	}
	wantCode(t, admin.Unregister(ctx, remoteContainer.ID), protocol.CodeInvalid)
	for i := 0; i < 2; i++ { // removal is idempotent
		if err := admin.Unregister(ctx, "ca"); err != nil {
			t.Fatalf("UNREGISTER #%d: %v", i+1, err)
		}
	}
	if a.ids.has("ca") {
		t.Error("the unregistered container is still in the identity map")
	}
	if got := runInNetns(t, ns, "hello", a, nil)["hello"]; got != "DENIED" {
		t.Errorf("HELLO from an unregistered container's namespace: %s, want DENIED", got)
	}
}

// Two separate processes in two containers' namespaces play the two
// libraries of one same-host connection: each gets its half of one
// socketpair, the bytes make the round trip, CONNS lists both ends over
// the admin socket, and the entries go when the processes exit.
func TestSameHostFastPathBetweenContainers(t *testing.T) {
	nsA, nsB := makeNetns(t), makeNetns(t)
	a := startAgent(t, newFakeDir(), nil)
	admin := adminClient(t, a)
	ca, cb := container("ca", "web", "10.244.1.2", nsA), container("cb", "db", "10.244.1.3", nsB)
	for _, c := range []directory.Container{ca, cb} {
		c.FreeFlow = true
		if err := admin.Register(ctxT(t), c); err != nil {
			t.Fatal(err)
		}
	}
	sock := a.cfg.LibrarySocket()
	cc, cs, con, acc := askPair(t, nsA, nsB,
		askSpec{Sock: sock, Ask: "connect", Local: "10.244.1.2:40000", Remote: "10.244.1.3:6379"},
		askSpec{Sock: sock, Listen: "0.0.0.0:6379", Ask: "accept", Local: "10.244.1.3:6379", Remote: "10.244.1.2:40000"})
	if con.Path != "unix" || acc.Path != "unix" || con.Data != "ok" || acc.Data != "ok" {
		t.Fatalf("connector %+v, acceptor %+v; want unix with the bytes through", con, acc)
	}
	got, err := admin.Conns(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []agentapi.ConnInfo{
		{Local: "10.244.1.3:6379", Remote: "10.244.1.2:40000", LocalContainer: "db", RemoteContainer: "web", Path: "unix", Reason: reasonLibNoShm},
		{Local: "10.244.1.2:40000", Remote: "10.244.1.3:6379", LocalContainer: "web", RemoteContainer: "db", Path: "unix", Reason: reasonLibNoShm},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("CONNS:\n got %+v\nwant %+v", got, want)
	}
	cc.finish()
	cs.finish()
	admin = adminClient(t, a) // the first may have idled out meanwhile
	if got, err := admin.Conns(ctxT(t)); err != nil || len(got) != 0 {
		t.Errorf("after both processes exited: %+v, %v; want none", got, err)
	}
	if st, err := admin.Status(ctxT(t)); err != nil || st.Connections.Unix != 2 || st.Connections.Live != 0 {
		t.Errorf("STATUS connections: %+v, %v", st.Connections, err)
	}
}
