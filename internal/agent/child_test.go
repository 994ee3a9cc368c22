package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// The real-namespace tests re-run this test binary inside a network
// namespace (ip netns exec) as a separate process, so the agent sees a
// caller in that namespace through SO_PEERCRED. TestMain turns such a run
// into the child, which reports what the agent answered as JSON on stdout.
const (
	envChild  = "FF_AGENT_TEST_CHILD" // the child's action
	envSock   = "FF_AGENT_TEST_SOCK"
	envAdmin  = "FF_AGENT_TEST_ADMIN"
	envVictim = "FF_AGENT_TEST_VICTIM" // JSON of the container to impersonate
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "ask":
		os.Exit(askChild())
	case "hold":
		os.Exit(holdChild())
	case "hold-ledger":
		os.Exit(holdLedgerChild())
	case "dial":
		os.Exit(dialChild())
	}
	if action := os.Getenv(envChild); action != "" {
		res, err := runChild(action)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		json.NewEncoder(os.Stdout).Encode(res)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childResult maps each step to "ok ..." or the agent's error code.
type childResult map[string]string

func outcome(detail string, err error) string {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return pe.Code.String()
	case err != nil:
		return "failed: " + err.Error()
	}
	return "ok " + detail
}

func runChild(action string) (childResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := childResult{}
	c, err := agentapi.Dial(os.Getenv(envSock))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	switch action {
	case "hello":
		id, err := c.Hello(ctx)
		res["hello"] = outcome(id.ID, err)
	case "impersonate":
		var victim directory.Container
		if err := json.Unmarshal([]byte(os.Getenv(envVictim)), &victim); err != nil {
			return nil, err
		}
		impersonate(ctx, c, victim, res)
	default:
		return nil, fmt.Errorf("unknown action %q", action)
	}
	return res, nil
}

// impersonate tries every way a library client could act as victim.
func impersonate(ctx context.Context, c *agentapi.Client, victim directory.Container, res childResult) {
	ip := netip.MustParseAddr(victim.IP)
	hello := protocol.New(protocol.TypeHello, 0,
		protocol.String(protocol.AttrContainerID, victim.ID), protocol.String(protocol.AttrName, victim.Name),
		protocol.IP(ip), protocol.String(protocol.AttrTenant, victim.Tenant), protocol.String(protocol.AttrHost, victim.Host))
	r, err := c.Call(ctx, hello, protocol.TypeHelloReply)
	id := ""
	if err == nil {
		id, _ = r.String(protocol.AttrContainerID)
	}
	res["hello"] = outcome(id, err)
	j, _ := protocol.JSON(victim)
	for name, m := range map[string]*protocol.Message{
		"register":   protocol.New(protocol.TypeRegister, 0, j),
		"unregister": protocol.New(protocol.TypeUnregister, 0, protocol.String(protocol.AttrContainerID, victim.ID)),
		"list":       protocol.New(protocol.TypeList, 0),
		"status":     protocol.New(protocol.TypeStatus, 0),
	} {
		_, err := c.Call(ctx, m, protocol.TypeOK)
		res[name] = outcome("", err)
	}
	admin, err := agentapi.DialAdmin(os.Getenv(envAdmin))
	if err == nil {
		admin.Close()
	}
	res["admin"] = outcome("", err)
}

// runInNetns runs the child action in network namespace ns.
func runInNetns(t *testing.T, ns, action string, a *testAgent, victim *directory.Container) childResult {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+action, envSock+"="+a.cfg.LibrarySocket(), envAdmin+"="+a.cfg.AdminSocket)
	if victim != nil {
		j, _ := json.Marshal(victim)
		cmd.Env = append(cmd.Env, envVictim+"="+string(j))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s in netns %s: %v: %s", action, ns, err, stderr.String())
	}
	res := childResult{}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	return res
}
