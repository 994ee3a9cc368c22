package container

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
)

// A container whose processes run the library moves as one without it
// once the library holds nothing CRIU cannot take (ARCHITECTURE.md,
// "Control flow: migrating a container"): its agent sessions, closed by
// RELEASE just before the dump, and no fast-path connection (shared
// memory, Unix socket pair, host TCP; parking those on plain TCP is not
// built yet) nor virtual RDMA resource. A link or connection the library
// makes meanwhile without its agent makes CRIU refuse the dump: the move
// is then undone, as for any refused dump.

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
// its source's agent lists fast-path connections or verbs resources of it.
func (m *Manager) libraryInUse(ctx context.Context, c *state.Container, src state.Host) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	agent, err := agentapi.DialAdmin(m.Layout.AdminSocket(src.Name))
	if err != nil {
		return fmt.Errorf("reach %s's agent to list %s's connections: %w", src.Name, c.Name, err)
	}
	defer agent.Close()
	conns, err := agent.Conns(ctx)
	if err != nil {
		return err
	}
	var fast []string
	for _, ci := range conns {
		if ci.Path == "overlay" || (ci.LocalContainer != c.Name && ci.RemoteContainer != c.Name) {
			continue
		}
		if len(fast) < 3 {
			fast = append(fast, fmt.Sprintf("%s %s-%s", ci.Path, ci.Local, ci.Remote))
		} else if len(fast) == 3 {
			fast = append(fast, "...")
		}
	}
	if len(fast) > 0 {
		return fmt.Errorf("its library holds connections on fast paths (%s), which cannot be parked on plain TCP for a checkpoint yet; "+
			"it can move once they are closed (connections to peers without the library, on the overlay, move with it)", strings.Join(fast, ", "))
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
}

// releaseSessions has the source's agent close the container's sessions
// and refuse new ones until until; the zero time ends that.
func (mv *move) releaseSessions(ctx context.Context, until time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	agent, err := agentapi.DialAdmin(mv.m.Layout.AdminSocket(mv.from.Name))
	if err != nil {
		return fmt.Errorf("reach %s's agent: %w", mv.from.Name, err)
	}
	defer agent.Close()
	return agent.Release(ctx, mv.c.ID, until)
}

// awaitOwnSockets waits until the container's processes hold no socket of
// another network namespace than their own: what the library got from its
// agent or from another container's library (links, fast-path channels),
// which CRIU cannot checkpoint. Its sessions are closed, so it gets no new
// one; a fast-path connection still open keeps one for good: refused.
func (mv *move) awaitOwnSockets(ctx context.Context) error {
	ns, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", mv.c.PID))
	if err != nil {
		return err
	}
	end := time.Now().Add(foreignWait)
	for {
		n, err := foreignSockets(pidsInNamespace(mv.c.PID), ns)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("its library still holds %d sockets of its agent's or of another container's after %v "+
				"(a fast-path connection, or a link to one that is still in use); it can move once its fast-path connections are closed", n, foreignWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// foreignSockets counts the sockets processes pids hold that belong to
// another network namespace than inode ns, each looked at through a copy
// of its descriptor (pidfd_getfd: nothing of the container's is opened).
func foreignSockets(pids []int, ns uint64) (int, error) {
	n := 0
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // gone meanwhile
		}
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		for _, e := range ents {
			fd, err := strconv.Atoi(e.Name())
			if target, _ := os.Readlink(dir + "/" + e.Name()); err != nil || !strings.HasPrefix(target, "socket:") {
				continue
			}
			other, err := socketNSDiffers(pidfd, fd, ns)
			if err != nil {
				unix.Close(pidfd)
				return 0, fmt.Errorf("look at socket %d of process %d: %w", fd, pid, err)
			}
			if other {
				n++
			}
		}
		unix.Close(pidfd)
	}
	return n, nil
}

// socketNSDiffers reports whether socket fd of the process behind pidfd
// lives in another network namespace than inode ns; a descriptor closed
// meanwhile does not.
func socketNSDiffers(pidfd, fd int, ns uint64) (bool, error) {
	got, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err == unix.EBADF || err == unix.ESRCH {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pidfd_getfd: %w", err)
	}
	defer unix.Close(got)
	nsfd, err := unix.IoctlRetInt(got, unix.SIOCGSKNS)
	if err != nil {
		return false, fmt.Errorf("read the socket's network namespace: %w", err)
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return false, err
	}
	return st.Ino != ns, nil
}
