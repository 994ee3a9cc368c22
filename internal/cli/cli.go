// Package cli implements the freeflow command line. Each command group lives
// in its own file and registers itself in commands; main only calls Main.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/freeflow-net/freeflow/internal/state"
)

// command is one `freeflow <name>` subcommand.
type command struct {
	summary string
	// run gets the global options and the arguments after the command name
	// (for "cluster", the words after "cluster").
	run func(g *Global, args []string) error
	// needsRoot commands fail early with a clear message when not root.
	needsRoot bool
}

var commands = map[string]command{}

func register(name string, c command) { commands[name] = c }

// Global holds options accepted before or after any command.
type Global struct {
	Cluster    string
	ClusterSet bool // --cluster was given (even if it names the default)
	Out        io.Writer
	Err        io.Writer
}

// Layout returns the state layout of the selected cluster.
func (g *Global) Layout() state.Layout { return state.NewLayout(g.Cluster) }

// exitStatus is returned by a command whose exit code is another
// program's (a container's), which has already said what went wrong.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// errUsage marks an error whose message already is the usage text.
var errUsage = errors.New("usage")

// Main runs the CLI and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	g := &Global{Cluster: state.DefaultCluster, Out: stdout, Err: stderr}
	rest, err := parseGlobal(g, args)
	if err != nil {
		fmt.Fprintf(stderr, "freeflow: %v\n", err)
		return 2
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		usage(stdout)
		return 0
	}
	c, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "freeflow: unknown command %q; run `freeflow help` for the list\n", rest[0])
		return 2
	}
	if err := state.ValidClusterName(g.Cluster); err != nil {
		fmt.Fprintf(stderr, "freeflow: %v\n", err)
		return 2
	}
	if c.needsRoot && os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "freeflow %s: must run as root (it creates network namespaces, mounts and containers); try sudo\n", rest[0])
		return 1
	}
	if err := c.run(g, rest[1:]); err != nil {
		var st exitStatus
		if errors.As(err, &st) {
			return int(st)
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "freeflow %s: %v\n", rest[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// parseGlobal takes --cluster NAME (or --cluster=NAME) from anywhere in args
// and returns the remaining words.
func parseGlobal(g *Global, args []string) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" { // everything after belongs to a container command
			rest = append(rest, args[i:]...)
			break
		}
		switch {
		case a == "--cluster" || a == "-cluster":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("--cluster needs a name")
			}
			g.Cluster, g.ClusterSet = args[i+1], true
			i++
		case strings.HasPrefix(a, "--cluster="):
			g.Cluster, g.ClusterSet = strings.TrimPrefix(a, "--cluster="), true
		default:
			rest = append(rest, a)
		}
	}
	return rest, nil
}

// newFlags returns a FlagSet for a command that reports errors, not exits.
func newFlags(g *Global, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("freeflow "+name, flag.ContinueOnError)
	fs.SetOutput(g.Err)
	return fs
}

// commaList splits an option value "a,b" into words, dropping empty ones.
func commaList(s string) []string {
	var out []string
	for _, w := range strings.Split(s, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "freeflow: a container network with shared-memory and host-network fast paths")
	fmt.Fprintln(w, "\nusage: freeflow [--cluster NAME] <command> [options]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\n--cluster NAME selects the cluster (default \"ff\"); every command accepts -h.")
}
