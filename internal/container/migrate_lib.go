package container

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
)

// A container whose processes run the library moves as one without it
// once the library holds nothing CRIU cannot take (ARCHITECTURE.md,
// "Control flow: migrating a container"): its shared-memory connections
// are parked on plain TCP at their overlay tuples (PARK_CONTAINER), its
// agent sessions closed by RELEASE just before the dump; a Unix socket
// pair or host TCP connection (not parked yet) or a virtual RDMA resource
// refuses the move. A link or connection the library makes meanwhile
// without its agent makes CRIU refuse the dump: the move is then undone,
// as for any refused dump.

// foreignWait bounds the wait for the library to let go of what its agent
// or another container's library gave it: a link ends LINK_TTL (2 s) after
// its grant, 1 s later at the acceptor, a pending offer after 1 s; all are
// closed by the library's reaper, also in a process that is idle.
const foreignWait = 5 * time.Second

// releaseHold bounds how long the source's agent refuses a moving
// container's sessions if the CLI dies mid-move (the library takes the
// overlay meanwhile); a move ends the hold, whichever way it ends.
const releaseHold = time.Minute

// libraryInUse refuses a move of c, whose processes run the library, while
// its source's agent lists fast-path connections it cannot park (all but
// shm) or verbs resources of it; it returns how many shm connections it
// has.
func (m *Manager) libraryInUse(ctx context.Context, c *state.Container, src state.Host) (shm int, err error) {
	err = m.withAgent(ctx, src.Name, func(ctx context.Context, agent *agentapi.AdminClient) error {
		conns, err := agent.Conns(ctx)
		if err != nil {
			return err
		}
		var fast []string
		for _, ci := range conns {
			// Its own ends only: another container's ledger names its peers itself.
			if ci.LocalContainer != c.Name || ci.Path == "overlay" {
				continue
			}
			if ci.Path == "shm" {
				if ci.RemoteContainer != c.Name || ci.Local < ci.Remote { // one inside it is listed at both ends
					shm++
				}
				continue
			}
			if len(fast) < 3 {
				fast = append(fast, fmt.Sprintf("%s %s-%s", ci.Path, ci.Local, ci.Remote))
			} else if len(fast) == 3 {
				fast = append(fast, "...")
			}
		}
		if len(fast) > 0 {
			return fmt.Errorf("its library holds connections on fast paths (%s) that cannot be parked on plain TCP for a checkpoint yet: "+
				"Unix socket pairs (a same-host connection its process held when it forked, as a redis background save or a postgres backend, "+
				"or any same-host connection of a container run with --no-shm) and host TCP (a peer with the library on another host) cannot, shared memory can; "+
				"it can move once they are closed (connections on the overlay or on shared memory move with it)", strings.Join(fast, ", "))
		}
		mem, err := agent.VerbsMem(ctx)
		if err != nil {
			return err
		}
		for _, v := range mem {
			if v.Container == c.Name && (v.QPs > 0 || v.Regions > 0) {
				return fmt.Errorf("it uses its virtual RDMA device (%d queue pairs, %d memory regions), whose shared memory cannot move yet", v.QPs, v.Regions)
			}
		}
		return nil
	})
	return shm, err
}

// parkWait bounds PARK_CONTAINER: above the agent's own bound (30 s).
const parkWait = 40 * time.Second

// parkShm has the source's agent park the container's shm connections on
// plain TCP (park.go there); it reports how many.
func (mv *move) parkShm(ctx context.Context) (n int, err error) {
	err = mv.m.withAgentFor(ctx, mv.from.Name, parkWait, func(ctx context.Context, agent *agentapi.AdminClient) error {
		n, err = agent.ParkContainer(ctx, mv.c.ID)
		return err
	})
	return n, err
}

// releaseSessions has the source's agent close the container's sessions
// and refuse new ones until until; the zero time ends that.
func (mv *move) releaseSessions(ctx context.Context, until time.Time) error {
	return mv.m.withAgent(ctx, mv.from.Name, func(ctx context.Context, agent *agentapi.AdminClient) error {
		return agent.Release(ctx, mv.c.ID, until)
	})
}

// awaitOwnSockets waits until the container's processes hold no socket of
// another network namespace than their own: what the library got from its
// agent or from another container's library (links, fast-path channels),
// which CRIU cannot checkpoint. Its sessions are closed, so it gets no new
// one; a fast-path connection still open keeps one for good: refused.
func (mv *move) awaitOwnSockets(ctx context.Context) error {
	end := time.Now().Add(foreignWait)
	for {
		n, err := foreignSockets(mv.c.PID, end)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("its library still holds %d sockets of its agent's or of another container's (or sockets of a kind "+
				"migrate cannot check) after %v: a fast-path connection, or a link to one still in use; it can move once its fast-path "+
				"connections are closed", n, foreignWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// foreignSockets counts the sockets the processes in init's pid namespace
// hold that the network namespace of init does not list in /proc/PID/net
// (by inode): nothing of the container's is opened or referenced, so no
// file of its can make this block. A pass past end stops counting.
func foreignSockets(init int, end time.Time) (int, error) {
	own, err := socketInodes(init)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pidsInNamespace(init) {
		if time.Now().After(end) {
			return max(n, 1), nil
		}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // gone meanwhile
		}
		for _, e := range ents {
			target, err := os.Readlink(dir + "/" + e.Name())
			ino, ok := strings.CutPrefix(target, "socket:[")
			if err != nil || !ok {
				continue
			}
			if !own[strings.TrimSuffix(ino, "]")] {
				n++
			}
		}
	}
	return n, nil
}

// socketTables are the files of /proc/PID/net that list a network
// namespace's sockets, and the field of a line that is the inode.
var socketTables = []struct {
	file  string
	field int
}{
	{"tcp", 9}, {"tcp6", 9}, {"udp", 9}, {"udp6", 9}, {"udplite", 9}, {"udplite6", 9},
	{"raw", 9}, {"raw6", 9}, {"unix", 6}, {"packet", 8}, {"netlink", 9},
}

// socketInodes is the set of the inodes of the sockets in pid's network
// namespace.
func socketInodes(pid int) (map[string]bool, error) {
	own := map[string]bool{}
	for _, t := range socketTables {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, t.file))
		if os.IsNotExist(err) {
			continue // a protocol this kernel has not
		}
		if err != nil {
			return nil, fmt.Errorf("list the sockets of the container's network namespace: %w", err)
		}
		lines := strings.Split(string(b), "\n")
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > t.field {
				own[f[t.field]] = true
			}
		}
	}
	return own, nil
}
