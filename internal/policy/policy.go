// Package policy decides which containers may share a fast path. It is
// data, not code: the cluster keeps one JSON document in the directory
// (/freeflow/<cluster>/policy), every agent reads it, and an absent or
// empty document means the default, same tenant only.
//
//	{
//	  "trusted_tenant_pairs": [["blue", "green"]],
//	  "no_fast_path": ["legacy-db"]
//	}
//
// trusted_tenant_pairs: containers of two different tenants listed as a
// pair trust each other (in both directions). no_fast_path: containers,
// by name, that never get a fast path, whoever their peer is.
//
// A fast path never grants reachability the overlay does not: both ends
// already hold an overlay connection. What policy guards is the channel:
// after the swap the two containers share a kernel object (or a host TCP
// connection) instead of going through the overlay's bridges and firewall
// hooks, so only peers that trust each other get one.
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// The reasons Trust gives for refusing; they become the REASON of PATH.
const (
	ReasonTenantDiffers = "tenant-differs"
	ReasonNoFastPath    = "no-fast-path"
)

// Policy is the parsed policy document. The zero value is the default.
type Policy struct {
	TrustedTenantPairs [][]string `json:"trusted_tenant_pairs,omitempty"`
	NoFastPath         []string   `json:"no_fast_path,omitempty"`
}

// Parse reads a policy document; nil or empty input is the default policy.
// Unknown fields are refused, so a misspelt rule is an error rather than a
// rule silently not applied.
func Parse(doc []byte) (Policy, error) {
	var p Policy
	if len(doc) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("policy: %w (want {\"trusted_tenant_pairs\": [[\"a\",\"b\"]], \"no_fast_path\": [\"name\"]})", err)
	}
	for _, pair := range p.TrustedTenantPairs {
		if len(pair) != 2 || pair[0] == "" || pair[1] == "" {
			return Policy{}, fmt.Errorf("policy: trusted_tenant_pairs entry %q is not a pair of two tenant names", pair)
		}
	}
	return p, nil
}

// Trust reports whether a and b may share a fast path under the default
// policy, and if not, why.
func Trust(a, b directory.Container) (ok bool, reason string) {
	return Policy{}.Trust(a, b)
}

// Trust reports whether a and b may share a fast path, and if not, why.
// It is symmetric: both agents of a connection reach the same answer.
func (p Policy) Trust(a, b directory.Container) (ok bool, reason string) {
	for _, name := range p.NoFastPath {
		if name == a.Name || name == b.Name {
			return false, ReasonNoFastPath
		}
	}
	if a.Tenant == b.Tenant {
		return true, ""
	}
	for _, pair := range p.TrustedTenantPairs {
		if (pair[0] == a.Tenant && pair[1] == b.Tenant) || (pair[0] == b.Tenant && pair[1] == a.Tenant) {
			return true, ""
		}
	}
	return false, ReasonTenantDiffers
}
