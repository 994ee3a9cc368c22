package agentapi

import "github.com/freeflow-net/freeflow/internal/directory"

// Version is the agent version reported in HELLO_REPLY and STATUS.
const Version = "0.1.0"

// Status is the STATUS reply body.
type Status struct {
	Cluster           string           `json:"cluster"`
	Host              string           `json:"host"`
	AgentVersion      string           `json:"agent_version"`
	PID               int              `json:"pid"`
	UptimeSeconds     float64          `json:"uptime_seconds"`
	Directory         directory.Health `json:"directory"`
	LocalContainers   int              `json:"local_containers"`
	Containers        int              `json:"containers"`
	ContainersPerHost map[string]int   `json:"containers_per_host"`
	Connections       ConnCounters     `json:"connections"`
	BrokerAddr        string           `json:"broker_addr,omitempty"`        // where cross-host offers are served
	BrokerError       string           `json:"broker_error,omitempty"`       // why they are not
	FabricGuardError  string           `json:"fabric_guard_error,omitempty"` // why no fabric socket is handed
	Limits            Limits           `json:"limits"`
	// SessionsHeld is how many library-socket sessions each local
	// container (by id) holds now.
	SessionsHeld map[string]int `json:"sessions_held"`
}

// Limits are the per-container limits in force (internal/agent/limits.go; ARCHITECTURE.md,
// "Limits").
type Limits struct {
	SessionsPerContainer int `json:"sessions_per_container"`  // what one container may hold now
	VerbsFDsPerContainer int `json:"verbs_fds_per_container"` // memfds one container's verbs QPs and regions may hold now
	AdminConns           int `json:"admin_conns"`
}

// ConnCounters counts the connection ends this agent answered since it
// started (a same-host connection has two ends here, a cross-host one has
// one on each agent). Bytes moved are not counted: after the swap the data
// never passes through the agent, and it keeps no reference to the
// channels (one would keep a peer from seeing EOF, or keep shm memory).
// ShmBytes is memory, not traffic: what the live shm channels are charged
// now (each channel once per end).
type ConnCounters struct {
	FastPath        uint64            `json:"fast_path"` // shm + unix + host_tcp
	Shm             uint64            `json:"shm"`
	Unix            uint64            `json:"unix"`
	HostTCP         uint64            `json:"host_tcp"`
	Fallback        uint64            `json:"fallback"`
	FallbackReasons map[string]uint64 `json:"fallback_reasons"`
	NotShmReasons   map[string]uint64 `json:"not_shm_reasons"` // why unix ends were not shm
	Live            int               `json:"live"`
	ShmBytes        uint64            `json:"shm_bytes"`
}
