// Package cluster brings a local FreeFlow cluster up and tears it down:
// host namespaces on a fabric, the baseline overlay, a managed etcd and one
// freeflowd per host.
//
// Teardown is discovery-based, not state-based: it finds everything by the
// cluster's name (namespaces "<cluster>-*", processes whose network namespace
// is one of them, crun containers under the cluster's crun root, mounts under
// the cluster directory), so `cluster down` cleans up completely even after
// the CLI was killed halfway through `cluster up` or cluster.json is gone.
package cluster
