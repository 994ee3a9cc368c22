package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
)

func init() {
	register("conns", command{
		summary:   "list live connections, their path (overlay, shm, unix, host-tcp) and why not faster; with --qps the verbs queue pairs, with --regions the verbs memory per container: conns [--qps|--regions] [--host H | --admin-socket PATH] [-o json]",
		run:       runConns,
		needsRoot: true,
	})
}

// connsTimeout bounds the question to each agent.
const connsTimeout = 5 * time.Second

func runConns(g *Global, args []string) error {
	fs := newFlags(g, "conns")
	host := fs.String("host", "", "only what this host's agent lists (default: every host)")
	format := fs.String("o", "table", "output format: table or json")
	qps := fs.Bool("qps", false, "list the verbs queue pairs instead: container, QPN, type, peer, path, state, bytes received")
	regions := fs.Bool("regions", false, "list per container what its verbs QPs and memory regions hold at its agent instead")
	admin := fs.String("admin-socket", "", "ask only the agent at this admin socket `path`, in a cluster the CLI did not make (`freeflowd conns` on a Kubernetes node)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*format != "table" && *format != "json") || fs.NArg() > 0 || (*qps && *regions) || (*admin != "" && *host != "") {
		return fmt.Errorf("%w: freeflow conns [--qps|--regions] [--host H | --admin-socket PATH] [-o table|json]", errUsage)
	}
	hosts := []agentAt{{what: "the agent at " + *admin, socket: *admin}}
	if *admin == "" {
		c, err := g.Layout().LoadCluster()
		if err != nil {
			return err
		}
		if hosts, err = connsHosts(g.Layout(), c, *host); err != nil {
			return err
		}
	}
	switch {
	case *qps:
		return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).QPs, printQPs)
	case *regions:
		return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).VerbsMem, printVerbsMem)
	}
	return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).Conns, printConns)
}

// listFromHosts asks every host's agent for its list with ask and prints
// them together, as a table with print or as JSON.
func listFromHosts[T any](g *Global, hosts []agentAt, format string,
	ask func(*agentapi.AdminClient, context.Context) ([]T, error), print func(io.Writer, []T) error) error {
	all := []T{}
	for _, h := range hosts {
		list, err := hostList(h, ask)
		if err != nil {
			return err
		}
		all = append(all, list...)
	}
	if format == "json" {
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return print(g.Out, all)
}

// agentAt is an agent to ask: what to call it in errors, and its admin
// socket.
type agentAt struct{ what, socket string }

// connsHosts returns the agents of the hosts to ask: one if named, else
// all.
func connsHosts(l state.Layout, c *state.Cluster, only string) ([]agentAt, error) {
	var hosts []agentAt
	for _, h := range c.Hosts {
		if only == "" || h.Name == only {
			hosts = append(hosts, agentAt{what: "host " + h.Name, socket: l.AdminSocket(h.Name)})
		}
	}
	if only != "" && len(hosts) == 0 {
		_, err := c.Host(only)
		return nil, err
	}
	return hosts, nil
}

// hostList asks agent h for its list with ask.
func hostList[T any](h agentAt, ask func(*agentapi.AdminClient, context.Context) ([]T, error)) ([]T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connsTimeout)
	defer cancel()
	a, err := agentapi.DialAdmin(h.socket)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (is the agent running? see `freeflow status`)", h.what, err)
	}
	defer a.Close()
	list, err := ask(a, ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.what, err)
	}
	return list, nil
}

func printConns(w io.Writer, cs []agentapi.ConnInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL\tREMOTE\tLOCAL-CONTAINER\tREMOTE-CONTAINER\tPATH\tREASON")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Local, c.Remote, c.LocalContainer, dash(c.RemoteContainer), c.Path, dash(c.Reason))
	}
	return tw.Flush()
}

func printQPs(w io.Writer, qps []agentapi.QPInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tQPN\tTYPE\tPEER-CONTAINER\tPEER-QPN\tPATH\tSTATE\tRX-BYTES")
	for _, q := range qps {
		peer := "-"
		if q.PeerQPN != 0 {
			peer = fmt.Sprintf("0x%06x", q.PeerQPN)
		}
		fmt.Fprintf(tw, "%s\t0x%06x\t%s\t%s\t%s\t%s\t%s\t%d\n", q.Container, q.QPN, q.Type, dash(q.PeerContainer), peer, q.Path, q.State, q.RxBytes)
	}
	return tw.Flush()
}

func printVerbsMem(w io.Writer, ms []agentapi.VerbsMemInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tQPS\tREGIONS\tREGION-BYTES\tMEMFDS\tMEMFD-LIMIT")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", m.Container, m.QPs, m.Regions, m.RegionBytes, m.Memfds, m.MemfdLimit)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
