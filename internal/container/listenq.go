package container

// A connection a container's listener has not handed to its program yet
// cannot move: CRIU refuses it ("In-flight connection"), and skipped
// (--skip-in-flight) it would be lost while its client sees it
// established (the restored listener resets it). So a move waits, before
// its switch, until the container's listen queues are empty: its program
// accepts what came, and from the switch on new SYNs go to the destination.

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
func inFlight(pid int) (int, error) {
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("list the connections of the container's network namespace: %w", err)
		}
		n += queued(string(b))
	}
	return n, nil
}

// queued counts, in a /proc/net/tcp table, the connections established that
// no program has accepted (a listener's rx_queue is its accept queue's
// length) and those still in their handshake (SYN_RECV).
func queued(table string) int {
	n := 0
	for _, l := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		switch f[3] {
		case "0A": // LISTEN
			if _, rx, ok := strings.Cut(f[4], ":"); ok {
				q, _ := strconv.ParseUint(rx, 16, 32)
				n += int(q)
			}
		case "03": // SYN_RECV
			n++
		}
	}
	return n
}

// awaitAccepted waits until the container's listen queues are empty.
func (mv *move) awaitAccepted(ctx context.Context) error {
	end := time.Now().Add(acceptWait)
	for {
		n, err := inFlight(mv.c.PID)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(end) {
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
