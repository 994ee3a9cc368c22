// Package openmpi launches Open MPI jobs whose ranks run in the containers
// of a FreeFlow cluster, the way the end-to-end tests and `freeflow bench`
// both do: mpirun runs in a host's network namespace, outside any
// container (like a job launcher on a login node), and starts one orted
// in each container through an rsh agent that enters the container with
// `freeflow exec`.
package openmpi

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/state"
)

// agentScript is Open MPI's launch agent ("AGENT HOST COMMAND...", where
// COMMAND is shell words, as for rsh): it runs COMMAND in the container
// named HOST.
const agentScript = `#!/bin/sh
host=$1; shift
exec %s --cluster %s exec "$host" -- sh -c "$*"
`

// WriteAgent writes the rsh agent for cluster, driving the freeflow
// binary at bin, as dir/rsh and returns its path. Every orted checks that
// the agent exists at the same path, as on a cluster with a shared
// filesystem, so the containers must mount dir at its own path.
func WriteAgent(dir, bin, cluster string) (string, error) {
	path := filepath.Join(dir, "rsh")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(agentScript, bin, cluster)), 0o755); err != nil {
		return "", fmt.Errorf("write the Open MPI launch agent: %w", err)
	}
	return path, nil
}

// Args are mpirun's options for a job launched through agent: mpirun
// launches every orted itself (no tree spawn: the orteds could not run
// freeflow), orteds reach mpirun over the overlay, and ranks yield when
// idle (the machines this runs on have few cores; a rank spinning in a
// receive would starve its peer). Add a transport (TCP or SharedMemory)
// and the hosts.
func Args(agent string) []string {
	return []string{"--allow-run-as-root", "-wdir", "/tmp",
		"--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
		"--mca", "oob_tcp_if_include", state.OverlayCIDR, "--mca", "mpi_yield_when_idle", "1"}
}

// TCP makes ranks talk over Open MPI's TCP transport on the overlay
// addresses: what FreeFlow sees and may move to a fast path. The ob1 PML
// is named: in a FreeFlow container Open MPI would otherwise take UCX on
// the verbs device (VerbsEnv).
func TCP() []string {
	return []string{"--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", state.OverlayCIDR}
}

// UCX makes ranks talk through UCX, which between FreeFlow containers
// takes their virtual verbs devices (rc_verbs, ud_verbs; docs/VERBS.md,
// "UCX and Open MPI"); ranks in one container, UCX's shared memory.
func UCX() []string {
	return []string{"--mca", "pml", "ucx"}
}

// SharedMemory makes ranks in one container talk through Open MPI's own
// shared memory (the vader transport, with its default single-copy
// mechanism): the HPC reference.
func SharedMemory() []string {
	return []string{"--mca", "btl", "vader,self"}
}
