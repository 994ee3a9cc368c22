package container

// A connection a container's listener has not handed to its program yet
// cannot move: CRIU refuses it ("In-flight connection"), and skipped
// (--skip-in-flight) it would be lost while its client sees it
// established (the restored listener resets it). So a move waits, before
// its switch, until the container's listen queues are empty: its program
// accepts what came, and from the switch on new SYNs go to the destination.
// Only connections established and not accepted refuse the move at the
// end of the wait: a handshake still under way (SYN_RECV) is waited for,
// not counted against it, as anyone who can reach the container can keep
// such requests alive for a minute (SYNs never acknowledged).

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// acceptWait bounds that wait; the container runs on meanwhile.
const acceptWait = 2 * time.Second

// inFlight counts the connections in the listen queues of pid's network
// namespace (/proc/PID/net/tcp and tcp6).
func inFlight(pid int) (accepts, handshakes int, err error) {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("list the connections of the container's network namespace: %w", err)
		}
		a, h := queued(string(b))
		accepts, handshakes = accepts+a, handshakes+h
	}
	return accepts, handshakes, nil
}

// queued counts, in a /proc/net/tcp table, the connections established that
// no program has accepted (a listener's rx_queue is its accept queue's
// length) and those still in their handshake (SYN_RECV).
func queued(table string) (accepts, handshakes int) {
	for _, l := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		switch f[3] {
		case "0A": // LISTEN
			if _, rx, ok := strings.Cut(f[4], ":"); ok {
				q, _ := strconv.ParseUint(rx, 16, 32)
				accepts += int(q)
			}
		case "03": // SYN_RECV
			handshakes++
		}
	}
	return accepts, handshakes
}

// awaitAccepted waits until the container's listen queues are empty.
func (mv *move) awaitAccepted(ctx context.Context) error {
	end := time.Now().Add(acceptWait)
	for {
		n, h, err := inFlight(mv.c.PID)
		late := time.Now().After(end)
		switch {
		case err != nil || n+h == 0 || (late && n == 0): // handshakes only: not refused (above)
			return err
		case late:
			return fmt.Errorf("%d connection(s) in its listen queues not accepted by its program after %v (CRIU cannot move one, "+
				"and its client sees it established): it can move once its program keeps up with its new connections",
				n, acceptWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
