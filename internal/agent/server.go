package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Listen creates both sockets and the broker port (see listenBroker). A
// socket file left by an agent that died is replaced; one that still
// answers means another agent serves it.
func (a *Agent) Listen() error {
	if err := os.MkdirAll(a.cfg.SockDir, 0o755); err != nil {
		return fmt.Errorf("agent: create socket directory: %w", err)
	}
	lib, err := listen(a.cfg.LibrarySocket(), 0o666)
	if err != nil {
		return err
	}
	admin, err := listen(a.cfg.AdminSocket, 0o600)
	if err != nil {
		lib.Close()
		return err
	}
	a.lib, a.admin = lib, admin
	a.listenBroker()
	a.raiseFileLimit()
	return nil
}

// raiseFileLimit makes room for every container's full share of
// connections (limits.go); short of it, the share shrinks with the number
// of containers registered (sessionShare).
func (a *Agent) raiseFileLimit() {
	want := fileLimit(a.subnet, a.fullShares(), a.cfg.AdminConns)
	got, err := raiseFileLimit(want)
	if got >= want {
		return
	}
	a.files.Store(got)
	full := sharesFitting(subnetContainers(a.subnet), a.cfg.AdminConns, got, a.fullShares())
	a.log.Warn("the open-file limit is short of every container's full share of sessions and verbs memfds; "+
		"a container's shares shrink to fit as containers register. "+
		"Give freeflowd CAP_SYS_RESOURCE or a higher hard limit (LimitNOFILE), or lower -sessions-per-container",
		"want_files", want, "have_files", got, "sessions_per_container_with_the_subnet_full", full.sessions,
		"verbs_fds_per_container_with_the_subnet_full", full.verbsFDs, "err", err)
}

func listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("agent: create directory of %s: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("agent: set mode %o on %s: %w", mode, path, err)
	}
	return l, nil
}

// removeStale removes a socket file nobody serves any more.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: check %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("agent: %s exists and is not a socket; remove it or choose another path", path)
	}
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("agent: another agent is already serving %s; stop it first", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("agent: remove stale socket %s: %w", path, err)
	}
	return nil
}

func (a *Agent) acceptLoop(ctx context.Context, l *net.UnixListener, admin bool) {
	defer a.wg.Done()
	for {
		uc, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off rather than spin.
			a.log.Warn("accept failed", "socket", l.Addr().String(), "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !a.track(uc) {
			uc.Close()
			continue
		}
		go a.serveConn(ctx, uc, admin)
	}
}

// track records uc so shutdown can close it; it refuses connections
// during shutdown. What a connection may hold is counted per caller once
// its goroutine knows who the caller is (admit).
func (a *Agent) track(uc *net.UnixConn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing {
		return false
	}
	a.conns[uc] = ""
	a.wg.Add(1)
	return true
}

func (a *Agent) untrack(uc *net.UnixConn) {
	a.mu.Lock()
	delete(a.conns, uc)
	a.mu.Unlock()
	uc.Close()
	a.wg.Done()
}

// shutdown stops accepting, closes every connection, waits for their
// goroutines, removes the socket files and unmaps the ledgers.
func (a *Agent) shutdown() {
	a.mu.Lock()
	a.closing = true
	for uc := range a.conns {
		uc.Close()
	}
	a.mu.Unlock()
	a.lib.Close() // a listener from ListenUnix unlinks its socket file on Close
	a.admin.Close()
	if a.broker != nil {
		a.broker.Close()
	}
	a.wg.Wait()
	a.ledgers.close()
	a.diag.closeAll()
	a.log.Info("agent stopped", "host", a.cfg.Host)
}

// peerCred returns the credentials the kernel recorded when the peer
// connected.
func peerCred(uc *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return cred, nil
}
