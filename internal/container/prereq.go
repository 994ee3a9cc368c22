package container

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/freeflow-net/freeflow/internal/cni"
)

// requiredPrograms maps each program a container needs to the Debian
// package that provides it.
var requiredPrograms = map[string]string{
	"crun":    "crun",
	"unshare": "util-linux",
	"mount":   "mount",
	"ip":      "iproute2",
}

// requiredPlugins are CNI plugins from Debian's containernetworking-plugins.
var requiredPlugins = []string{"bridge", "host-local"}

// checkPrereqs reports every missing program and plugin by the Debian
// package to install.
func checkPrereqs(pluginPath []string) error {
	missing := map[string][]string{}
	for prog, pkg := range requiredPrograms {
		if _, err := exec.LookPath(prog); err != nil {
			missing[pkg] = append(missing[pkg], prog)
		}
	}
	for _, p := range requiredPlugins {
		if !inPath(pluginPath, p) {
			missing["containernetworking-plugins"] = append(missing["containernetworking-plugins"], "CNI plugin "+p)
		}
	}
	if !inPath(pluginPath, cni.PluginType) {
		return fmt.Errorf("CNI plugin freeflow-cni not found in %s; build it (make) so it sits next to freeflow",
			strings.Join(pluginPath, ":"))
	}
	if len(missing) == 0 {
		return nil
	}
	var pkgs, what []string
	for pkg, progs := range missing {
		pkgs = append(pkgs, pkg)
		what = append(what, progs...)
	}
	sort.Strings(pkgs)
	sort.Strings(what)
	return fmt.Errorf("missing %s; install the Debian package(s): apt-get install -t bookworm %s",
		strings.Join(what, ", "), strings.Join(pkgs, " "))
}

// inPath reports whether the CNI plugin name is in one of dirs.
func inPath(dirs []string, name string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}
