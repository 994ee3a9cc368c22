package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/freeflow-net/freeflow/internal/cli"
	"github.com/freeflow-net/freeflow/internal/state"
)

// connsMain is `freeflowd conns`: `freeflow conns` asked of this node's
// agent, for a cluster the CLI did not make, where the agent's pod is
// the place to ask from (`kubectl -n freeflow-system exec POD -c agent --
// /freeflow/freeflowd conns`; docs/KUBERNETES-DEPLOY.md).
func connsMain(args []string) int {
	fs := flag.NewFlagSet("freeflowd conns", flag.ContinueOnError)
	cluster := fs.String("cluster", state.DefaultCluster, "cluster `name` (as the agent's --cluster)")
	node := fs.String("node", os.Getenv("NODE_NAME"), "the agent's node `name` (default $NODE_NAME)")
	admin := fs.String("admin-socket", "", "the agent's admin socket `path` (default: the agent's, from --cluster and --node)")
	format := fs.String("o", "table", "output format: table or json")
	qps := fs.Bool("qps", false, "list the verbs queue pairs instead")
	regions := fs.Bool("regions", false, "list the verbs memory per container instead")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *admin == "" {
		if *node == "" {
			fmt.Fprintln(os.Stderr, "freeflowd conns: --node is required (or NODE_NAME, which FreeFlow's DaemonSet sets)")
			return 2
		}
		*admin = state.NewLayout(*cluster).AdminSocket(*node)
	}
	cmd := []string{"conns", "--admin-socket", *admin, "-o", *format}
	if *qps {
		cmd = append(cmd, "--qps")
	}
	if *regions {
		cmd = append(cmd, "--regions")
	}
	return cli.Main(append(cmd, fs.Args()...), os.Stdout, os.Stderr)
}
