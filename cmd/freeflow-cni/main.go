// Command freeflow-cni is FreeFlow's CNI plugin: chained after bridge +
// host-local, it checks the source of what each container sends and
// registers containers with their host's agent (see
// internal/cni for the configuration and CNI_ARGS it reads).
package main

import (
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/freeflow-net/freeflow/internal/cni"
)

func main() {
	p := &cni.Plugin{Dial: cni.DialAgent, Guard: cni.NFTables{}, Now: time.Now, Stdout: os.Stdout}
	skel.PluginMainFuncs(p.Funcs(), cni.Versions(), "freeflow-cni: registers containers with the FreeFlow host agent")
}
