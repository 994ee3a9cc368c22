package cluster

import (
	"context"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/etcdproc"
	"github.com/freeflow-net/freeflow/internal/state"
)

// statusTimeout bounds each probe of `freeflow status`, so a hung agent or
// an unreachable etcd makes status slow by at most this, never stuck.
const statusTimeout = 2 * time.Second

// Report is what `freeflow status` shows.
type Report struct {
	Cluster string       `json:"cluster"`
	Phase   state.Phase  `json:"phase"`
	Created string       `json:"created"`
	Etcd    EtcdReport   `json:"etcd"`
	Hosts   []HostReport `json:"hosts"`
	Cached  []string     `json:"serving_from_cache,omitempty"` // hosts whose agent lost etcd
	// NoAgents: the CLI started no agents (`cluster up --no-agents`).
	NoAgents bool `json:"no_agents,omitempty"`
}

// EtcdReport is the directory as the CLI sees it.
type EtcdReport struct {
	Endpoints []string `json:"endpoints"`
	Managed   bool     `json:"managed"`
	PID       int      `json:"pid,omitempty"`
	Running   bool     `json:"running"` // managed: the process is alive
	Healthy   bool     `json:"healthy"` // answers /health from the cluster's side
	Error     string   `json:"error,omitempty"`
}

// HostReport is one host with its agent.
type HostReport struct {
	state.Host
	AgentRunning bool             `json:"agent_running"`
	Agent        *agentapi.Status `json:"agent,omitempty"` // nil when it did not answer
	AgentError   string           `json:"agent_error,omitempty"`
	Containers   []string         `json:"containers"` // names the CLI started on this host
}

// Status probes every part of the cluster described by c.
func Status(ctx context.Context, l state.Layout, c *state.Cluster) Report {
	r := Report{Cluster: c.Name, Phase: c.Phase, Created: c.Created, Etcd: etcdReport(ctx, l, c), NoAgents: c.NoAgents}
	byHost := map[string][]string{}
	if cs, err := l.Containers(); err == nil {
		for _, ct := range cs {
			byHost[ct.Host] = append(byHost[ct.Host], ct.Name)
		}
	}
	for _, h := range c.Hosts {
		hr := HostReport{Host: h, AgentRunning: runs(h.AgentPID, AgentBinary), Containers: byHost[h.Name]}
		pctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := AgentStatus(pctx, l.AdminSocket(h.Name))
		cancel()
		if err != nil {
			hr.AgentError = err.Error()
		} else {
			hr.Agent = &st
			if !st.Directory.Connected {
				r.Cached = append(r.Cached, h.Name)
			}
		}
		r.Hosts = append(r.Hosts, hr)
	}
	return r
}

func etcdReport(ctx context.Context, l state.Layout, c *state.Cluster) EtcdReport {
	e := EtcdReport{Endpoints: c.Etcd.Endpoints, Managed: c.Etcd.Managed, PID: c.Etcd.PID}
	e.Running = e.Managed && runs(e.PID, etcdproc.Binary)
	if len(c.Hosts) == 0 || len(e.Endpoints) == 0 {
		e.Error = "not started"
		return e
	}
	// Probe from where the agents dial it: a managed etcd from a host on
	// the fabric, an external one from the CLI's own namespace.
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	ns, hint := "", "check that it runs and is reachable from where freeflow runs"
	if e.Managed {
		ns, hint = l.HostNetNS(c.Hosts[0].Name), "see "+etcdLog(l)
	}
	if err := waitEtcd(ctx, ns, e.Endpoints[0], 0, hint); err != nil {
		e.Error = err.Error()
	} else {
		e.Healthy = true
	}
	return e
}
