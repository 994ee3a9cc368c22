package overlay

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// run executes an iproute2 program (ip or bridge) and returns its output in
// the error, since that is where iproute2 says what went wrong.
func run(prog string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// ipIn runs `ip -n ns args...`.
func ipIn(ns string, args ...string) error {
	return run("ip", append([]string{"-n", ns}, args...)...)
}

// steps runs ip commands in ns in order and stops at the first failure.
func steps(ns string, cmds ...[]string) error {
	for _, c := range cmds {
		if err := ipIn(ns, c...); err != nil {
			return err
		}
	}
	return nil
}
