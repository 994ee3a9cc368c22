package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/freeflow-net/freeflow/internal/cluster"
)

func init() {
	register("status", command{
		summary:   "show hosts, agents, directory health and containers per host [-o json]",
		run:       runStatus,
		needsRoot: true,
	})
}

func runStatus(g *Global, args []string) error {
	fs := newFlags(g, "status")
	format := fs.String("o", "text", "output format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: -o %q: use text or json", errUsage, *format)
	}
	c, err := g.Layout().LoadCluster()
	if err != nil {
		return err
	}
	r := cluster.Status(context.Background(), g.Layout(), c)
	if *format == "json" {
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printStatus(g.Out, r)
	return nil
}

func printStatus(w io.Writer, r cluster.Report) {
	fmt.Fprintf(w, "cluster %s: %s, %d %s, created %s\n", r.Cluster, r.Phase, len(r.Hosts), plural(len(r.Hosts), "host"), r.Created)
	fmt.Fprintf(w, "directory: %s\n", etcdLine(r.Etcd))
	if len(r.Cached) > 0 {
		fmt.Fprintf(w, "WARNING: agents on %s cannot reach etcd and are serving from their cache; new containers on other hosts are not seen until it is back\n", strings.Join(r.Cached, ", "))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tFABRIC-IP\tSUBNET\tAGENT\tDIRECTORY\tCONTAINERS")
	for _, h := range r.Hosts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Name, h.FabricIP, h.Subnet, agentCell(r, h), directoryCell(h), containersCell(h))
	}
	tw.Flush()
	for _, h := range r.Hosts {
		if h.AgentError != "" && !r.NoAgents {
			fmt.Fprintf(w, "%s: agent not answering: %s\n", h.Name, h.AgentError)
		}
	}
}

func etcdLine(e cluster.EtcdReport) string {
	where := strings.Join(e.Endpoints, ",")
	kind := "external"
	if e.Managed {
		kind = fmt.Sprintf("managed, pid %d %s", e.PID, runningWord(e.Running))
	}
	if e.Healthy {
		return fmt.Sprintf("etcd %s (%s): healthy", where, kind)
	}
	return fmt.Sprintf("etcd %s (%s): UNREACHABLE: %s", where, kind, e.Error)
}

func agentCell(r cluster.Report, h cluster.HostReport) string {
	if h.Agent != nil {
		return fmt.Sprintf("pid %d up %s", h.Agent.PID, (time.Duration(h.Agent.UptimeSeconds) * time.Second).String())
	}
	if r.NoAgents {
		return "none (--no-agents)"
	}
	return fmt.Sprintf("pid %d %s, not answering", h.AgentPID, runningWord(h.AgentRunning))
}

func directoryCell(h cluster.HostReport) string {
	if h.Agent == nil {
		return "-"
	}
	d := h.Agent.Directory
	if d.Connected {
		return fmt.Sprintf("connected (rev %d)", d.Revision)
	}
	since := "never synced"
	if !d.LastSync.IsZero() {
		since = "last sync " + time.Since(d.LastSync).Round(time.Second).String() + " ago"
	}
	return "CACHE ONLY (" + since + ")"
}

func containersCell(h cluster.HostReport) string {
	n := len(h.Containers)
	if h.Agent != nil {
		n = h.Agent.LocalContainers // the directory's count, which CNI users add to as well
	}
	if len(h.Containers) == 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d: %s", n, strings.Join(h.Containers, " "))
}

func runningWord(ok bool) string {
	if ok {
		return "running"
	}
	return "NOT RUNNING"
}
