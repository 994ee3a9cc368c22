package cluster

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// A pid saved in the cluster state that another program took since (the
// agent or etcd exited and the pid was reused) is not taken for the
// cluster's process: `cluster up` starts it again, `agent stop` signals
// nothing. Nor is one that exited, a zombie not yet reaped.
func TestRunsRejectsReusedPid(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	if !runs(pid, "/usr/bin/sleep") {
		t.Fatalf("runs(%d, sleep) = false for a running sleep", pid)
	}
	for _, prog := range []string{AgentBinary, "/usr/bin/etcd"} {
		if runs(pid, prog) {
			t.Errorf("runs(%d, %s) = true for a pid that runs sleep", pid, prog)
		}
	}
	if runs(0, AgentBinary) || runs(-1, AgentBinary) {
		t.Error("runs took pid 0 or -1 for a process")
	}

	cmd.Process.Kill()
	waitZombie(t, pid)
	if runs(pid, "sleep") || alive(pid) {
		t.Errorf("pid %d, a zombie, taken for a running process", pid)
	}
}

// waitZombie waits until pid, a killed child not yet reaped, is a zombie.
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatalf("wait for pid %d to exit: %v", pid, err)
	}
}
