package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a locked OS thread that has joined the network namespace
// bound at path, then switches the thread back. If it cannot switch back the
// thread stays locked, so the Go runtime discards it when the goroutine ends
// instead of handing a thread in the wrong namespace to other goroutines.
func Do(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	origin, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current network namespace: %w", err)
	}
	defer origin.Close()

	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
		// Deliberately no UnlockOSThread: the thread dies with this goroutine.
		return fmt.Errorf("return from network namespace %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Dial connects to addr from inside the network namespace bound at nsPath.
// A socket belongs to the namespace it was created in, so the returned
// connection reaches addresses that exist only inside that namespace even
// though the caller runs elsewhere (for example the CLI in the root
// namespace talking to etcd on the fabric).
func Dial(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := Do(nsPath, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s %s in %s: %w", network, addr, nsPath, err)
	}
	return conn, nil
}

// Listen opens a listener inside the network namespace bound at nsPath.
func Listen(nsPath, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(nsPath, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, addr, nsPath, err)
	}
	return l, nil
}
