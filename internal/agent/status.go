package agent

import (
	"os"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
)

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

// Limits are the per-container limits in force (limits.go; ARCHITECTURE.md,
// "Limits").
type Limits struct {
	SessionsPerContainer int `json:"sessions_per_container"` // what one container may hold now
	AdminConns           int `json:"admin_conns"`
}

func (a *Agent) status() Status {
	cs := a.dir.Containers()
	per := map[string]int{}
	for _, c := range cs {
		per[c.Host]++
	}
	return Status{
		Cluster:           a.cfg.Cluster,
		Host:              a.cfg.Host,
		AgentVersion:      Version,
		PID:               os.Getpid(),
		UptimeSeconds:     time.Since(a.started).Seconds(),
		Directory:         a.dir.Health(),
		LocalContainers:   per[a.cfg.Host],
		Containers:        len(cs),
		ContainersPerHost: per,
		Connections:       a.connCounters(),
		BrokerAddr:        a.brokerAddr(),
		BrokerError:       a.brokerErr,
		FabricGuardError:  a.guardErr,
		Limits:            Limits{SessionsPerContainer: a.sessionShare(), AdminConns: a.cfg.AdminConns},
		SessionsHeld:      a.sessions.all(),
	}
}

// connCounters returns the connection counters with the shm memory held
// now, the processes' ledgers included (each connection end once).
func (a *Agent) connCounters() ConnCounters {
	a.settled() // a restarted agent finds its host's ledgers (ledgerscan.go)
	a.ledgers.prune()
	listed := a.reconciled("", 0)
	c := a.live.counters() // prunes the table
	_, c.ShmBytes = a.shm.charged("")
	opened := a.ledgers.opened()
	c.FastPath += opened.shm + opened.tcp
	c.Shm += opened.shm
	c.HostTCP += opened.tcp
	if opened.noLibrary > 0 {
		c.Fallback += opened.noLibrary
		c.FallbackReasons[reasonNoLibrary] += opened.noLibrary
	}
	c.Live += len(listed)
	for _, e := range listed {
		c.ShmBytes += uint64(e.bytes)
	}
	return c
}

func (a *Agent) brokerAddr() string {
	if a.broker == nil {
		return ""
	}
	return a.broker.Addr().String()
}
