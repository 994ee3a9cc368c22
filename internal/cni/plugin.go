package cni

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/freeflow-net/freeflow/internal/directory"
)

// Registry is the part of the host agent's admin API the plugin uses; unit
// tests replace it with a fake.
type Registry interface {
	Register(ctx context.Context, c directory.Container) error
	Unregister(ctx context.Context, id string) error
	List(ctx context.Context) ([]directory.Container, error)
	Close() error
}

// agentTimeout bounds every exchange with the agent, so a wedged agent
// fails the CNI call instead of hanging the runtime.
const agentTimeout = 10 * time.Second

// Plugin implements the CNI commands of freeflow-cni.
type Plugin struct {
	Dial   func(socket string) (Registry, error)
	Guard  SourceGuard // the per-container source checks (sourceguard.go)
	Now    func() time.Time
	Stdout io.Writer // where ADD prints its result
}

// Funcs returns the plugin's commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check}
}

// Add installs the container's source checks, registers the container
// with the host agent and passes prevResult on unchanged. A container
// whose checks cannot be installed is not attached.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, rec, err := p.load(args)
	if err != nil {
		return err
	}
	port, err := portOf(conf, net.ParseIP(rec.IP))
	if err != nil {
		return err
	}
	if err := p.Guard.Install(args.ContainerID, port); err != nil {
		return err
	}
	err = p.withAgent(conf.AgentSocket, func(ctx context.Context, reg Registry) error {
		if err := reg.Register(ctx, rec); err != nil {
			return agentError(fmt.Sprintf("register container %s (%s, %s)", rec.Name, rec.ID, rec.IP), conf.AgentSocket, err)
		}
		return nil
	})
	if err != nil {
		p.Guard.Remove(args.ContainerID) // the error that matters is err
		return err
	}
	return printResult(p.Stdout, conf)
}

// Del unregisters the container and removes its source checks, the
// second even when the first fails. It needs no prevResult and succeeds
// when the container is not registered, so it can be repeated.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	conf, err := loadNetConf(args.StdinData)
	if err != nil {
		return err
	}
	err = p.withAgent(conf.AgentSocket, func(ctx context.Context, reg Registry) error {
		if err := reg.Unregister(ctx, args.ContainerID); err != nil {
			return agentError("unregister container "+args.ContainerID, conf.AgentSocket, err)
		}
		return nil
	})
	if gerr := p.Guard.Remove(args.ContainerID); err == nil {
		err = gerr
	}
	return err
}

// Check verifies that the agent has the container registered with the IP
// prevResult gave it.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	conf, want, err := p.load(args)
	if err != nil {
		return err
	}
	return p.withAgent(conf.AgentSocket, func(ctx context.Context, reg Registry) error {
		list, err := reg.List(ctx)
		if err != nil {
			return agentError("list containers", conf.AgentSocket, err)
		}
		return checkRegistered(list, want)
	})
}

// load reads the netconf and builds the container's directory record.
func (p *Plugin) load(args *skel.CmdArgs) (*NetConf, directory.Container, error) {
	conf, err := loadNetConf(args.StdinData)
	if err != nil {
		return nil, directory.Container{}, err
	}
	rec, err := p.record(conf, args)
	return conf, rec, err
}

// withAgent runs do with a connection to the agent at socket, bounded by
// agentTimeout, and closes the connection after.
func (p *Plugin) withAgent(socket string, do func(context.Context, Registry) error) error {
	reg, err := p.dial(socket)
	if err != nil {
		return err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	return do(ctx, reg)
}

func checkRegistered(list []directory.Container, want directory.Container) error {
	for _, c := range list {
		if c.ID != want.ID {
			continue
		}
		if c.IP != want.IP {
			return types.NewError(types.ErrInternal, fmt.Sprintf(
				"freeflow: container %s is registered with IP %s, but its interface has %s", want.ID, c.IP, want.IP), "")
		}
		return nil
	}
	return types.NewError(types.ErrUnknownContainer, fmt.Sprintf(
		"freeflow: container %s is not registered with the agent on %s", want.ID, want.Host), "")
}

// record builds the directory record of the container from the netconf,
// CNI_ARGS and the container IP in prevResult.
func (p *Plugin) record(conf *NetConf, args *skel.CmdArgs) (directory.Container, error) {
	a, err := parseArgs(args.Args, args.ContainerID)
	if err != nil {
		return directory.Container{}, err
	}
	ip, err := containerIP(conf, args.Netns)
	if err != nil {
		return directory.Container{}, err
	}
	return directory.Container{
		ID: args.ContainerID, Name: a.Name, Host: conf.Host, IP: ip.String(), Tenant: a.Tenant,
		NetNS: args.Netns, FreeFlow: a.FreeFlow, NoShm: a.NoShm, Created: p.Now().UTC(),
	}, nil
}

// containerIP returns the address prevResult gave the container: the first
// IPv4 address on an interface inside netns (the sandbox), falling back to
// any IPv4 address, then to any address.
func containerIP(conf *NetConf, netns string) (net.IP, error) {
	if conf.PrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			"freeflow: no prevResult; chain the plugin after one that assigns addresses (e.g. bridge with host-local IPAM)", "")
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "freeflow: convert prevResult", err.Error())
	}
	var best, fallback net.IP
	for _, ipc := range res.IPs {
		ip := ipc.Address.IP
		if fallback == nil || (fallback.To4() == nil && ip.To4() != nil) {
			fallback = ip
		}
		inSandbox := ipc.Interface != nil && *ipc.Interface >= 0 && *ipc.Interface < len(res.Interfaces) &&
			res.Interfaces[*ipc.Interface].Sandbox != ""
		if inSandbox && ip.To4() != nil && best == nil {
			best = ip
		}
	}
	if best == nil {
		best = fallback
	}
	if best == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			"freeflow: prevResult has no IP address for container in "+netns+"; is IPAM configured in the plugin before freeflow?", "")
	}
	return best, nil
}

// portOf returns the port of the container at ip, from prevResult.
func portOf(conf *NetConf, ip net.IP) (Port, error) {
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return Port{}, types.NewError(types.ErrDecodingFailure, "freeflow: convert prevResult", err.Error())
	}
	return containerPort(res, ip)
}

// printResult writes prevResult unchanged, in the configuration's version.
func printResult(w io.Writer, conf *NetConf) error {
	res, err := conf.PrevResult.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrIncompatibleCNIVersion, "freeflow: convert prevResult to version "+conf.CNIVersion, err.Error())
	}
	if err := res.PrintTo(w); err != nil {
		return types.NewError(types.ErrIOFailure, "freeflow: print result", err.Error())
	}
	return nil
}

func (p *Plugin) dial(socket string) (Registry, error) {
	reg, err := p.Dial(socket)
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf(
			"freeflow: cannot reach the host agent at %s; the agent may be down (check `freeflow status`)", socket), err.Error())
	}
	return reg, nil
}

// agentError turns an agent's refusal into a CNI error naming what failed.
func agentError(what, socket string, err error) error {
	return types.NewError(cniCode(err), fmt.Sprintf("freeflow: %s with the agent at %s failed", what, socket), err.Error())
}
