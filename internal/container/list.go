package container

import (
	"fmt"

	"github.com/freeflow-net/freeflow/internal/state"
)

// Container states as ps shows them.
const (
	StatusCreated = "created" // being set up, or crun created it but it has not started
	StatusRunning = "running"
	StatusExited  = "exited"
	StatusUnknown = "unknown" // crun could not tell
)

// Info is one line of `freeflow ps`.
type Info struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	IP     string `json:"ip"`
	Tenant string `json:"tenant"`
	PID    int    `json:"pid"`
	Status string `json:"status"`
}

// List returns every container of the cluster, sorted by name.
func (m *Manager) List() ([]Info, error) {
	cs, err := m.Layout.Containers()
	if err != nil {
		return nil, fmt.Errorf("list containers of cluster %q: %w", m.Layout.Cluster, err)
	}
	out := make([]Info, 0, len(cs))
	for i := range cs {
		c := &cs[i]
		out = append(out, Info{Name: c.Name, Host: c.Host, IP: c.IP, Tenant: c.Tenant, PID: c.PID, Status: m.status(c)})
	}
	return out, nil
}

// status asks crun (or, for a migrated container, the kernel); crun forgets a foreground container when it exits, so
// a container crun does not know has exited (or not started yet).
func (m *Manager) status(c *state.Container) string {
	if c.Restored {
		return restoredStatus(c)
	}
	st, ok, err := m.runtime().state(c.ID)
	switch {
	case err != nil:
		return StatusUnknown
	case !ok && c.PID == 0:
		return StatusCreated
	case !ok:
		return StatusExited
	case st.Status == "running":
		return StatusRunning
	case st.Status == "created":
		return StatusCreated
	default:
		return StatusExited
	}
}
