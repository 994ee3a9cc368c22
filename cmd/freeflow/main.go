// Command freeflow drives a local FreeFlow cluster: hosts, containers,
// status and benchmarks.
package main

import (
	"os"

	"github.com/freeflow-net/freeflow/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
