// Package directory holds the records of the cluster-wide map of where
// every container lives: what the agents store, what the CNI plugin
// registers, what the CLI lists. It has no etcd in it, so a client links it
// cheaply; the etcd-backed store that every agent caches is
// internal/directory/etcd.
package directory

import "time"

// Container is one registered container.
type Container struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Host     string `json:"host"`
	IP       string `json:"ip"`
	Tenant   string `json:"tenant"`
	NetNS    string `json:"netns"`            // path of its network namespace on its host
	FreeFlow bool   `json:"freeflow"`         // runs with libfreeflow preloaded
	NoShm    bool   `json:"no_shm,omitempty"` // never gets a shared-memory channel (`freeflow run --no-shm`)
	// Moved: migrated (`freeflow migrate`) with its address, which stays in
	// another host's subnet.
	Moved   bool      `json:"moved,omitempty"`
	Created time.Time `json:"created"`
}

// Host is one host running an agent.
type Host struct {
	Name     string `json:"name"`
	FabricIP string `json:"fabric_ip"`
	Subnet   string `json:"subnet"`
}

// Health describes the link between a cache and etcd.
type Health struct {
	Connected bool      `json:"connected"`            // the watch is live
	Revision  int64     `json:"revision"`             // last etcd revision applied to the cache
	LastSync  time.Time `json:"last_sync"`            // when the cache was last known complete
	LastError string    `json:"last_error,omitempty"` // why it is not connected
}
