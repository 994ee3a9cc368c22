package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/state"
)

// agentClientPy speaks the agent protocol (docs/PROTOCOL.md) from inside a
// container with nothing but python3, as a hostile program could:
//
//	hello                 prints the identity the agent gives the caller
//	register JSON         sends REGISTER with JSON, prints the reply
//	unregister ID         sends UNREGISTER, prints the reply
const agentClientPy = `
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect("/run/freeflow/agent.sock")
def msg(t, seq, attrs):
    p = b"".join(struct.pack("<HH", a, len(v)) + v for a, v in attrs)
    return struct.pack("<HBBII", 0x4646, 1, t, seq, len(p)) + p
def call(t, seq, attrs):
    s.send(msg(t, seq, attrs))
    r = s.recv(65536)
    _, _, rt, rseq, n = struct.unpack("<HBBII", r[:12])
    out, p = {}, r[12:12 + n]
    while p:
        a, l = struct.unpack("<HH", p[:4]); out[a] = p[4:4 + l]; p = p[4 + l:]
    return rt, out
rt, a = call(0x01, 1, [])
if sys.argv[1] == "hello":
    print("type=%#x name=%s id=%s" % (rt, a.get(4, b"").decode(), a.get(7, b"").decode()))
elif sys.argv[1] == "register":
    rt, a = call(0x40, 2, [(13, sys.argv[2].encode())])
    print("type=%#x code=%d" % (rt, struct.unpack("<I", a[1])[0] if 1 in a else 0))
elif sys.argv[1] == "unregister":
    rt, a = call(0x41, 2, [(7, sys.argv[2].encode())])
    print("type=%#x code=%d" % (rt, struct.unpack("<I", a[1])[0] if 1 in a else 0))
`

// TestImpersonationRefused: a process in container A that asks the agent as
// if it were container B is refused; the agent names it A whatever it sends,
// and B's registration is untouched.
func TestImpersonationRefused(t *testing.T) {
	c := newCluster(t, 1)
	l := state.NewLayout(c.Name)
	runIdle(t, c, "h1", "alice", "blue")
	runIdle(t, c, "h1", "bob", "red")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bob := lookup(ctx, t, l, "bob")

	if out := c.MustFF(t, "exec", "alice", "--", "python3", "-c", agentClientPy, "hello"); !strings.Contains(out, "name=alice") {
		t.Fatalf("HELLO from alice: %q, want the agent to name the caller alice", out)
	}
	forged := bob
	forged.Tenant = "blue" // what a thief would want: bob's address in alice's tenant
	body, _ := json.Marshal(forged)
	const denied = "type=0x7f code=5"
	if out := c.MustFF(t, "exec", "alice", "--", "python3", "-c", agentClientPy, "register", string(body)); !strings.Contains(out, denied) {
		t.Fatalf("REGISTER as bob from alice: %q, want %q (DENIED)", out, denied)
	}
	if out := c.MustFF(t, "exec", "alice", "--", "python3", "-c", agentClientPy, "unregister", bob.ID); !strings.Contains(out, denied) {
		t.Fatalf("UNREGISTER bob from alice: %q, want %q (DENIED)", out, denied)
	}
	if after := lookup(ctx, t, l, "bob"); after != bob {
		t.Fatalf("bob's record changed after alice's attempts: %+v, was %+v", after, bob)
	}
}

// lookup returns the directory record of container name, via h1's agent.
func lookup(ctx context.Context, t *testing.T, l state.Layout, name string) directory.Container {
	t.Helper()
	c, found, err := listed(ctx, l, "h1", name)
	must(t, err, "list containers on h1")
	if !found {
		t.Fatalf("container %q is not registered", name)
	}
	return c
}

// reachPy tries a TCP connection to each host:port argument (1 s each) and
// prints "<addr> open" or "<addr> closed <error>".
const reachPy = `
import socket, sys
for a in sys.argv[1:]:
    h, p = a.rsplit(":", 1)
    try:
        socket.create_connection((h, int(p)), timeout=1).close(); print(a, "open")
    except OSError as e:
        print(a, "closed", e)
`

// TestContainerCannotReachControlPlane: containers have no route to the
// fabric, so neither the directory (etcd) nor the agents' offer port can
// be reached from inside one, whatever its tenant.
func TestContainerCannotReachControlPlane(t *testing.T) {
	c := newCluster(t, 2)
	runIdle(t, c, "h1", "probe", "blue")
	targets := []string{
		fmt.Sprintf("%s:%d", state.FabricEtcd, state.EtcdPort),
		state.NewHost(1).FabricIP + ":7947", state.NewHost(2).FabricIP + ":7947",
	}
	out := c.MustFF(t, append([]string{"exec", "probe", "--", "python3", "-c", reachPy}, targets...)...)
	for _, a := range targets {
		if !strings.Contains(out, a+" closed") {
			t.Errorf("a container reached %s:\n%s", a, out)
		}
	}
}
