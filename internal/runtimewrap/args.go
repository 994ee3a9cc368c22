package runtimewrap

import "strings"

// runc's global flags that take a value (runc --help); the first other
// argument that is not a flag is the subcommand.
var globalValueFlags = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}

// cmdline is a runc command line: global flags, the subcommand, and what
// follows it.
type cmdline struct {
	globals []string
	sub     string // "" when there is none (runc --version)
	rest    []string
}

func parseArgs(args []string) cmdline {
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
		return cmdline{globals: args}
	}
	return cmdline{globals: args[:i], sub: args[i], rest: args[i+1:]}
}

// flag returns the value of the subcommand's flag called by one of names
// (--name v, --name=v, -n v).
func (c cmdline) flag(names ...string) (string, bool) {
	for j, arg := range c.rest {
		name, hasValue, ok := flagName(arg)
		if !ok || !contains(names, name) {
			continue
		}
		if hasValue {
			return arg[strings.Index(arg, "=")+1:], true
		}
		if j+1 < len(c.rest) {
			return c.rest[j+1], true
		}
	}
	return "", false
}

// bundle is the bundle a create or run names, the working directory when
// none, as for runc.
func (c cmdline) bundle() string {
	if b, ok := c.flag("bundle", "b"); ok {
		return b
	}
	return "."
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
