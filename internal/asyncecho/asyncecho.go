// Package asyncecho holds the same echo workload written for three async
// runtimes that serve most event-loop programs: tokio (edge-triggered
// epoll, a multi-threaded runtime), asyncio on uvloop and Node.js (both
// libuv's level-triggered epoll loop). The e2e tests run them as real
// programs in containers and check every byte; `freeflow bench` times them.
//
// All three take the same command line:
//
//	serve PORT
//	send HOST PORT CONNS IN_FLIGHT SIZE ROUNDS
//
// A round makes CONNS connections, IN_FLIGHT at a time; each writes SIZE
// bytes (its own pattern) while it reads, half-closes, reads the echo to
// EOF and compares. A connection with no full echo within 20 s counts as
// hung. The client prints, on stdout, one line per round and then a
// tally (details of each failed connection go to stderr):
//
//	round SECONDS
//	failed reset R timeout T other O
//	OK INTACT
package asyncecho

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

//go:embed echo.js echo_uvloop.py tokio/Cargo.toml tokio/Cargo.lock tokio/src/main.rs
var files embed.FS

// The programs' file names, for Write.
const (
	NodeFile   = "echo.js"
	UvloopFile = "echo_uvloop.py"
)

// Node is the Node.js program, for `node -e`.
func Node() string { return read(NodeFile) }

// Uvloop is the Python program, for `python3 -c` (Debian's python3, which
// python3-uvloop is for).
func Uvloop() string { return read(UvloopFile) }

// Write writes the program file name (NodeFile, UvloopFile) into dir and
// returns its path.
func Write(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(read(name)), 0o644); err != nil {
		return "", fmt.Errorf("write the echo program %s: %w", name, err)
	}
	return path, nil
}

// DebianPython is the python3 that python3-uvloop is installed for; a
// PATH may put another first.
const DebianPython = "/usr/bin/python3"

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded above: cannot happen
	}
	return string(b)
}

// BuildTokio builds the tokio program with cargo (crates from crates.io or
// cargo's cache) in target, a directory kept between builds so a second
// build costs nothing, and returns the binary's path.
func BuildTokio(ctx context.Context, target string) (string, error) {
	src := filepath.Join(target, "src")
	if err := writeCrate(src); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "cargo", "build", "--release", "--locked", "--quiet",
		"--manifest-path", filepath.Join(src, "Cargo.toml"), "--target-dir", filepath.Join(target, "target"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cargo build of the tokio echo program (needs cargo ≥ 1.85, e.g. from rustup, and crates.io or a filled cargo cache): %w: %s",
			err, strings.TrimSpace(string(out)))
	}
	return filepath.Join(target, "target", "release", "ffecho"), nil
}

// writeCrate writes the tokio crate's files into dir.
func writeCrate(dir string) error {
	return fs.WalkDir(files, "tokio", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := files.ReadFile(path)
		dst := filepath.Join(dir, strings.TrimPrefix(path, "tokio/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("write the tokio echo crate: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return fmt.Errorf("write the tokio echo crate: %w", err)
		}
		return nil
	})
}

// Result is what a client printed.
type Result struct {
	Rounds                []float64 // seconds per round
	Reset, Timeout, Other int       // failed connections, by kind
	OK                    int       // intact connections
}

// Parse reads a client's stdout.
func Parse(out string) (Result, error) {
	var r Result
	sawOK := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		var err error
		switch {
		case len(f) == 2 && f[0] == "round":
			var s float64
			s, err = strconv.ParseFloat(f[1], 64)
			r.Rounds = append(r.Rounds, s)
		case len(f) == 7 && f[0] == "failed":
			_, err = fmt.Sscanf(line, "failed reset %d timeout %d other %d", &r.Reset, &r.Timeout, &r.Other)
		case len(f) == 2 && f[0] == "OK":
			r.OK, err = strconv.Atoi(f[1])
			sawOK = true
		default:
			err = fmt.Errorf("unexpected line")
		}
		if err != nil {
			return r, fmt.Errorf("echo client output line %q: %w", line, err)
		}
	}
	if !sawOK || len(r.Rounds) == 0 {
		return r, fmt.Errorf("echo client output has no rounds or no OK line: %q", out)
	}
	return r, nil
}

// Failed is how many connections did not come back intact.
func (r Result) Failed() int { return r.Reset + r.Timeout + r.Other }
