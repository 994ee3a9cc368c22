package directory

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ClusterKeySize is the length of the key the agents of a cluster
// authenticate their fast-path offers with.
const ClusterKeySize = 32

// Settings are the cluster's settings, chosen at `freeflow cluster up`. The
// zero value, also what an absent document means, is the default.
type Settings struct {
	// NoShm turns shared-memory channels off in the whole cluster: same-host
	// fast paths are AF_UNIX socket pairs (`cluster up --no-shm`).
	NoShm bool `json:"no_shm,omitempty"`
	// ShmBudget is how many bytes of shared-memory channels one container
	// may be charged for at once; 0 means the agents' default.
	ShmBudget uint64 `json:"shm_budget,omitempty"`
}

// ParseSettings reads a settings document; nil or empty input is the
// default. Unknown fields are refused, so a misspelt setting is an error
// rather than a setting silently not applied.
func ParseSettings(doc []byte) (Settings, error) {
	var s Settings
	if len(doc) == 0 {
		return s, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Settings{}, fmt.Errorf("directory: cluster settings: %w (want {\"no_shm\": true, \"shm_budget\": <bytes>})", err)
	}
	return s, nil
}
