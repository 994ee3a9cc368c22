package runtimewrap

import "strings"

// runc's global flags that take a value (runc --help); the first other
// argument that is not a flag is the subcommand.
var globalValueFlags = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}

// parseArgs finds the subcommand of a runc command line and, for create
// and run, the bundle it names (--bundle/-b; the working directory when
// absent, as for runc). sub is "" when there is none.
func parseArgs(args []string) (sub, bundle string) {
	i := 0
	for ; i < len(args); i++ {
		name, hasValue, ok := flagName(args[i])
		if !ok {
			break
		}
		if globalValueFlags[name] && !hasValue {
			i++
		}
	}
	if i >= len(args) {
		return "", ""
	}
	sub, bundle = args[i], "."
	for j := i + 1; j < len(args); j++ {
		name, hasValue, ok := flagName(args[j])
		if !ok || (name != "bundle" && name != "b") {
			continue
		}
		if hasValue {
			bundle = args[j][strings.Index(args[j], "=")+1:]
		} else if j+1 < len(args) {
			bundle = args[j+1]
		}
	}
	return sub, bundle
}

// flagName returns the name of a flag argument (-x, --x, -x=v, --x=v) and
// whether its value is attached; ok is false for anything else.
func flagName(arg string) (name string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if k, _, found := strings.Cut(name, "="); found {
		return k, true, true
	}
	return name, false, true
}
