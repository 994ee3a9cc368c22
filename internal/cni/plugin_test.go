package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// fakeAgent records registrations like the agent's admin API.
type fakeAgent struct {
	byID   map[string]directory.Container
	err    error // returned by every call when set
	closed int
}

func (f *fakeAgent) Register(_ context.Context, c directory.Container) error {
	if f.err != nil {
		return f.err
	}
	f.byID[c.ID] = c
	return nil
}

func (f *fakeAgent) Unregister(_ context.Context, id string) error {
	if f.err != nil {
		return f.err
	}
	delete(f.byID, id)
	return nil
}

func (f *fakeAgent) List(context.Context) ([]directory.Container, error) {
	var out []directory.Container
	for _, c := range f.byID {
		out = append(out, c)
	}
	return out, f.err
}

func (f *fakeAgent) Close() error { f.closed++; return nil }

var created = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeGuard records the source checks installed, by container id.
type fakeGuard struct {
	ports map[string]Port
	err   error // returned by Install when set
}

func (g *fakeGuard) Install(id string, p Port) error {
	if g.err != nil {
		return g.err
	}
	g.ports[id] = p
	return nil
}

func (g *fakeGuard) Remove(id string) error { delete(g.ports, id); return nil }

func newTestPlugin(f *fakeAgent, out *bytes.Buffer) *Plugin {
	return &Plugin{
		Dial:   func(string) (Registry, error) { return f, nil },
		Guard:  &fakeGuard{ports: map[string]Port{}},
		Now:    func() time.Time { return created },
		Stdout: out,
	}
}

// prevResult is what bridge + host-local hand on: host veth, bridge, and
// the container interface (index 2) holding the address.
const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"ffbr0"},{"name":"veth1"},
 {"name":"eth0","mac":"02:42:0a:f4:01:07","sandbox":"/run/netns/t-c-srv"}],
 "ips":[{"address":"10.244.1.1/24","interface":0},{"address":"10.244.1.7/24","gateway":"10.244.1.1","interface":2}],
 "routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]}`

func stdin(t *testing.T, version, prev string) []byte {
	t.Helper()
	conf := `{"cniVersion":"` + version + `","name":"freeflow","type":"freeflow",
	 "agentSocket":"/run/freeflow/t/hosts/h1/admin.sock","host":"h1","cluster":"t"`
	if prev != "" {
		conf += `,"prevResult":` + prev
	}
	return []byte(conf + "}")
}

func cmdArgs(t *testing.T, version, prev, cniArgs string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "t-srv", Netns: "/run/netns/t-c-srv", IfName: "eth0",
		Args: cniArgs, StdinData: stdin(t, version, prev)}
}

func TestAddRegistersAndPassesResultOn(t *testing.T) {
	f := &fakeAgent{byID: map[string]directory.Container{}}
	var out bytes.Buffer
	p := newTestPlugin(f, &out)
	err := p.Add(cmdArgs(t, "1.0.0", prevResult, "IgnoreUnknown=1;FF_NAME=srv;FF_TENANT=blue;FF_FREEFLOW=false;FF_SHM=false;K8S_POD_NAME=x"))
	if err != nil {
		t.Fatal(err)
	}
	want := directory.Container{ID: "t-srv", Name: "srv", Host: "h1", IP: "10.244.1.7", Tenant: "blue",
		NetNS: "/run/netns/t-c-srv", FreeFlow: false, NoShm: true, Created: created}
	if got := f.byID["t-srv"]; got != want {
		t.Fatalf("registered %+v, want %+v", got, want)
	}
	var got, orig map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("ADD output is not JSON: %v\n%s", err, out.String())
	}
	json.Unmarshal([]byte(prevResult), &orig)
	if gb, _ := json.Marshal(got); !bytes.Equal(gb, mustJSON(orig)) {
		t.Fatalf("ADD changed the result:\n got %s\nwant %s", gb, mustJSON(orig))
	}
	if f.closed != 1 {
		t.Fatalf("agent connection closed %d times, want 1", f.closed)
	}
	port := p.Guard.(*fakeGuard).ports["t-srv"]
	if strings.Join(port.HostSide, ",") != "ffbr0,veth1" || port.MAC != "02:42:0a:f4:01:07" || port.IP.String() != "10.244.1.7" {
		t.Fatalf("source checks installed for %+v; want host side ffbr0,veth1, MAC 02:42:0a:f4:01:07, IP 10.244.1.7", port)
	}
}

// TestAddWithoutSourceChecksAttachesNothing: a container whose source
// checks cannot be installed is not registered; one the agent refuses
// keeps no checks.
func TestAddWithoutSourceChecksAttachesNothing(t *testing.T) {
	f := &fakeAgent{byID: map[string]directory.Container{}}
	p := newTestPlugin(f, &bytes.Buffer{})
	g := p.Guard.(*fakeGuard)
	g.err = types.NewError(types.ErrInternal, "freeflow: nft", "no nft")
	assertCNIError(t, "guard fails", p.Add(cmdArgs(t, "1.0.0", prevResult, "")), types.ErrInternal, "nft")
	if len(f.byID) != 0 {
		t.Fatalf("registered without source checks: %v", f.byID)
	}
	g.err, f.err = nil, errors.New("INVALID: duplicate name")
	assertCNIError(t, "agent refuses", p.Add(cmdArgs(t, "1.0.0", prevResult, "")), types.ErrInternal, "register")
	if len(g.ports) != 0 {
		t.Fatalf("source checks left after a refused registration: %v", g.ports)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestAddOldVersionsAndDefaults(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0"} {
		prev := `{"cniVersion":"` + v + `","interfaces":[{"name":"eth0","sandbox":"/x"}],
		 "ips":[{"version":"4","address":"10.244.2.9/24","interface":0}]}`
		f := &fakeAgent{byID: map[string]directory.Container{}}
		var out bytes.Buffer
		if err := newTestPlugin(f, &out).Add(cmdArgs(t, v, prev, "")); err != nil {
			t.Fatalf("version %s: %v", v, err)
		}
		got := f.byID["t-srv"]
		if got.IP != "10.244.2.9" || got.Name != "t-srv" || got.Tenant != DefaultTenant || !got.FreeFlow || got.NoShm {
			t.Fatalf("version %s: registered %+v; want IP 10.244.2.9, name = container id, tenant default, freeflow, shm allowed", v, got)
		}
		if !strings.Contains(out.String(), `"cniVersion": "`+v+`"`) {
			t.Fatalf("version %s: output not in that version:\n%s", v, out.String())
		}
	}
}

// A CRI runtime's pod: the plugin registers it as namespace/name with its
// namespace as tenant, from the K8S_POD_* keys the runtime passes (which
// it accepts even without IgnoreUnknown=1); FF_* keys still win.
func TestAddKubernetesPod(t *testing.T) {
	const k8s = "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=t-srv;K8S_POD_UID=0c5f9f3e-8c1b-4b8e-9a53-3a4d0e0f7c11"
	for cniArgs, want := range map[string][2]string{
		k8s:                                  {"shop/web-0", "shop"},
		"IgnoreUnknown=1;" + k8s:             {"shop/web-0", "shop"},
		k8s + ";FF_TENANT=blue":              {"shop/web-0", "blue"},
		k8s + ";FF_NAME=db;FF_FREEFLOW=true": {"db", "shop"},
	} {
		f := &fakeAgent{byID: map[string]directory.Container{}}
		if err := newTestPlugin(f, &bytes.Buffer{}).Add(cmdArgs(t, "1.0.0", prevResult, cniArgs)); err != nil {
			t.Fatalf("%s: %v", cniArgs, err)
		}
		if got := f.byID["t-srv"]; got.Name != want[0] || got.Tenant != want[1] || got.IP != "10.244.1.7" {
			t.Errorf("%s: registered %+v; want name %s, tenant %s", cniArgs, got, want[0], want[1])
		}
	}
}

func TestAddErrors(t *testing.T) {
	cases := []struct {
		name    string
		args    *skel.CmdArgs
		agent   error
		code    uint
		message string
	}{
		{"no prevResult", cmdArgs(t, "1.0.0", "", ""), nil, types.ErrInvalidNetworkConfig, "no prevResult"},
		{"unknown arg", cmdArgs(t, "1.0.0", prevResult, "FF_NAME=a;OTHER=b"), nil, types.ErrInvalidEnvironmentVariables, "IgnoreUnknown=1"},
		{"bad bool", cmdArgs(t, "1.0.0", prevResult, "FF_FREEFLOW=maybe"), nil, types.ErrInvalidEnvironmentVariables, "CNI_ARGS"},
		{"bad json", &skel.CmdArgs{StdinData: []byte("{")}, nil, types.ErrDecodingFailure, "parse network configuration"},
		{"no socket", &skel.CmdArgs{StdinData: []byte(`{"cniVersion":"1.0.0","host":"h1"}`)}, nil, types.ErrInvalidNetworkConfig, "agentSocket"},
		{"agent refuses", cmdArgs(t, "1.0.0", prevResult, ""), errors.New("INVALID: duplicate name"), types.ErrInternal, "register container t-srv"},
	}
	for _, c := range cases {
		f := &fakeAgent{byID: map[string]directory.Container{}, err: c.agent}
		err := newTestPlugin(f, &bytes.Buffer{}).Add(c.args)
		assertCNIError(t, c.name, err, c.code, c.message)
	}
}

func assertCNIError(t *testing.T, name string, err error, code uint, msg string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: got %v (%T), want a CNI error", name, err, err)
	}
	if e.Code != code || !strings.Contains(e.Error(), msg) {
		t.Fatalf("%s: got code %d %q, want code %d containing %q", name, e.Code, e.Error(), code, msg)
	}
}

func TestAgentDownNamesSocket(t *testing.T) {
	p := &Plugin{Dial: func(string) (Registry, error) { return nil, errors.New("connection refused") },
		Guard: &fakeGuard{ports: map[string]Port{}}, Now: time.Now}
	err := p.Del(cmdArgs(t, "1.0.0", "", ""))
	assertCNIError(t, "agent down", err, types.ErrTryAgainLater, "/run/freeflow/t/hosts/h1/admin.sock; the agent may be down")
}

func TestDelIsIdempotent(t *testing.T) {
	f := &fakeAgent{byID: map[string]directory.Container{"t-srv": {ID: "t-srv"}}}
	p := newTestPlugin(f, &bytes.Buffer{})
	for i := 0; i < 2; i++ {
		if err := p.Del(cmdArgs(t, "1.0.0", "", "")); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
	}
	if len(f.byID) != 0 {
		t.Fatalf("still registered after DEL: %v", f.byID)
	}
}

// TestDelRemovesSourceChecksWhenAgentDown: DEL removes the checks even
// when the agent cannot be reached, and says so.
func TestDelRemovesSourceChecksWhenAgentDown(t *testing.T) {
	g := &fakeGuard{ports: map[string]Port{"t-srv": {}}}
	p := &Plugin{Dial: func(string) (Registry, error) { return nil, errors.New("connection refused") }, Guard: g, Now: time.Now}
	assertCNIError(t, "agent down", p.Del(cmdArgs(t, "1.0.0", "", "")), types.ErrTryAgainLater, "agent may be down")
	if len(g.ports) != 0 {
		t.Fatalf("source checks left after DEL: %v", g.ports)
	}
}

func TestCheck(t *testing.T) {
	f := &fakeAgent{byID: map[string]directory.Container{}}
	p := newTestPlugin(f, &bytes.Buffer{})
	args := cmdArgs(t, "1.0.0", prevResult, "")
	assertCNIError(t, "not registered", p.Check(args), types.ErrUnknownContainer, "not registered")
	f.byID["t-srv"] = directory.Container{ID: "t-srv", IP: "10.244.1.8"}
	assertCNIError(t, "wrong IP", p.Check(args), types.ErrInternal, "registered with IP 10.244.1.8")
	f.byID["t-srv"] = directory.Container{ID: "t-srv", IP: "10.244.1.7"}
	if err := p.Check(args); err != nil {
		t.Fatalf("CHECK of a registered container: %v", err)
	}
}

func TestVersions(t *testing.T) {
	got := strings.Join(Versions().SupportedVersions(), ",")
	if got != "0.3.0,0.3.1,0.4.0,1.0.0" {
		t.Fatalf("supported versions %s", got)
	}
}

func TestAgentErrorCodes(t *testing.T) {
	cases := map[protocol.Code]uint{
		protocol.CodeUnavailable: types.ErrTryAgainLater,
		protocol.CodeInvalid:     types.ErrInvalidNetworkConfig,
		protocol.CodeInternal:    types.ErrInternal,
	}
	for code, want := range cases {
		f := &fakeAgent{byID: map[string]directory.Container{}, err: protocol.Errorf(code, "etcd is down")}
		err := newTestPlugin(f, &bytes.Buffer{}).Add(cmdArgs(t, "1.0.0", prevResult, ""))
		assertCNIError(t, code.String(), err, want, "etcd is down")
	}
}
