package agent

import (
	"os"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
)

func (a *Agent) status() agentapi.Status {
	cs := a.dir.Containers()
	per := map[string]int{}
	for _, c := range cs {
		per[c.Host]++
	}
	return agentapi.Status{
		Cluster:           a.cfg.Cluster,
		Host:              a.cfg.Host,
		AgentVersion:      agentapi.Version,
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
		Limits:            a.limits(),
		SessionsHeld:      a.sessions.all(),
	}
}

// connCounters returns the connection counters with the shm memory held
// now, the processes' ledgers included (each connection end once).
func (a *Agent) connCounters() agentapi.ConnCounters {
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

// limits are the per-container shares in force now (limits.go).
func (a *Agent) limits() agentapi.Limits {
	sh := a.share()
	return agentapi.Limits{SessionsPerContainer: sh.sessions, VerbsFDsPerContainer: sh.verbsFDs, AdminConns: a.cfg.AdminConns}
}
