// Package cni is FreeFlow's CNI side: the freeflow-cni plugin (a chained
// plugin that registers containers with their host agent), the per-host
// network configuration list, and the libcni calls the CLI uses to attach
// and detach containers.
//
// The plugin runs after bridge + host-local in the chain. It reads the
// container's IP from prevResult and registers it with the agent over the
// agent's admin socket. Per-container facts come from CNI_ARGS:
//
//	FF_NAME=<name>          container name (default: the pod's namespace/name, else CNI_CONTAINERID)
//	FF_TENANT=<tenant>      tenant (default: the pod's namespace, else "default")
//	FF_FREEFLOW=true|false  the container runs with libfreeflow (default true)
//	FF_SHM=true|false       its same-host fast paths may be shared memory (default true)
//
// Kubernetes runtimes (the CRI plugins of containerd and CRI-O) pass the
// pod's K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_INFRA_CONTAINER_ID and
// K8S_POD_UID; the plugin names a pod namespace/name, which is how the
// Kubernetes datastore finds the pod to annotate (internal/directory/kube),
// and takes its namespace as the tenant (that datastore then applies the
// pod's freeflow.io/tenant label, if any). The other two keys are accepted
// and not used: CNI_CONTAINERID is the sandbox already.
//
// Unknown keys are an error unless CNI_ARGS also holds IgnoreUnknown=1, as
// for every CNI plugin; host-local parses the same CNI_ARGS, so runtimes
// passing FF_* keys must set IgnoreUnknown=1 anyway.
package cni

import (
	"cmp"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// NetConf is the freeflow plugin's entry in a network configuration list.
type NetConf struct {
	types.NetConf
	AgentSocket string `json:"agentSocket"` // the host agent's admin socket
	Host        string `json:"host"`        // host name recorded in the directory
	Cluster     string `json:"cluster"`
}

// Args are the FF_* keys of CNI_ARGS.
type Args struct {
	types.CommonArgs
	FF_NAME     types.UnmarshallableString //nolint:revive // names are the CNI_ARGS keys
	FF_TENANT   types.UnmarshallableString
	FF_FREEFLOW *types.UnmarshallableBool
	FF_SHM      *types.UnmarshallableBool

	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // as the CRI plugins name them
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
	K8S_POD_UID                types.UnmarshallableString
}

// DefaultTenant is used when CNI_ARGS has neither FF_TENANT nor
// K8S_POD_NAMESPACE.
const DefaultTenant = "default"

// loadNetConf parses the plugin's stdin and, when present, its prevResult.
func loadNetConf(stdin []byte) (*NetConf, error) {
	var conf NetConf
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "freeflow: parse network configuration", err.Error())
	}
	if conf.AgentSocket == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			`freeflow: network configuration needs "agentSocket" (the host agent's admin socket)`, "")
	}
	if conf.Host == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			`freeflow: network configuration needs "host" (the name of this host)`, "")
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "freeflow: parse prevResult", err.Error())
	}
	return &conf, nil
}

// containerArgs holds the parsed FF_* keys with defaults applied.
type containerArgs struct {
	Name     string
	Tenant   string
	FreeFlow bool
	NoShm    bool
}

// parseArgs parses CNI_ARGS; containerID is the default name.
func parseArgs(cniArgs, containerID string) (containerArgs, error) {
	var a Args
	if err := types.LoadArgs(cniArgs, &a); err != nil {
		return containerArgs{}, types.NewError(types.ErrInvalidEnvironmentVariables,
			"freeflow: parse CNI_ARGS (set IgnoreUnknown=1 to pass keys meant for other plugins)", err.Error())
	}
	out := containerArgs{Name: string(a.FF_NAME), Tenant: string(a.FF_TENANT), FreeFlow: true}
	ns, pod := string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME)
	if out.Name == "" && ns != "" && pod != "" {
		out.Name = ns + "/" + pod
	}
	if out.Name == "" {
		out.Name = containerID
	}
	if out.Tenant == "" {
		out.Tenant = cmp.Or(ns, DefaultTenant)
	}
	if a.FF_FREEFLOW != nil {
		out.FreeFlow = bool(*a.FF_FREEFLOW)
	}
	if a.FF_SHM != nil {
		out.NoShm = !bool(*a.FF_SHM)
	}
	return out, nil
}

// supportedVersions are the CNI spec versions the plugin speaks.
var supportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0")

// Versions returns the CNI spec versions the plugin supports.
func Versions() version.PluginInfo { return supportedVersions }
