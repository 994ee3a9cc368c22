// Command freeflow-runtime is the OCI runtime containerd runs for pods on a
// FreeFlow node: it gives each container the FreeFlow library and its
// agent's socket, then runs runc (see internal/runtimewrap).
package main

import (
	"fmt"
	"os"

	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

func main() {
	err := runtimewrap.Main(os.Args[1:])
	fmt.Fprintln(os.Stderr, "freeflow-runtime:", err)
	os.Exit(1)
}
