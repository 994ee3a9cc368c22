package bench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/container"
	"github.com/freeflow-net/freeflow/internal/state"
)

// The migration experiment (`--only migrate`, and part of the full run;
// issue 20): `freeflow migrate` (internal/container/migrate.go) moves a
// redis-server, started on h1 without the library and with it (its
// connections to the peers on the overlay) and filled to the case's
// memory, to h2 while two peers, one on h1 and one on h2, each hold one
// connection and INCR every 2 ms, every reply checked. The peers' slowest
// reply during the move is the downtime they see; `migrate -o json` gives
// CRIU's parts. It moves containers, so it runs on a cluster of its own
// (or the one --cluster names) after the path experiments, a new server
// for every run.

// MigrateName selects the migration experiment in --only.
const MigrateName = "migrate"

const (
	groupMigration = "migration"
	pathMigrate    = "h1-to-h2"
	pathMigrateLib = "h1-to-h2-lib"
)

var (
	migratePath = PathInfo{Name: pathMigrate, Group: groupMigration, Role: RoleMeasured,
		Server: "redis-server on h1, --no-freeflow, moved to h2", Client: "a peer on h1 and one on h2, --no-freeflow, one connection each",
		Target: "the server's IP",
		About:  "`freeflow migrate NAME --to h2` of a running container without the library: CRIU dump with its TCP connections, the overlay routes its IP to h2, CRIU restore there"}
	migrateLibPath = PathInfo{Name: pathMigrateLib, Group: groupMigration, Role: RoleMeasured,
		Server: "redis-server on h1 with the library, moved to h2",
		Client: "a peer on h1 with the library (its connection on shared memory) and one on h2, --no-freeflow, one connection each",
		Target: "the server's IP",
		About: "the same of a container running the library: before the freeze its source's agent parks its shared-memory connection to the h1 peer on TCP " +
			"at the connection's overlay tuple (PARK_CONTAINER, while the server runs on), closes its sessions (RELEASE), and the CLI waits until it " +
			"holds no socket of another namespace"}
	migratePaths = []PathInfo{migratePath, migrateLibPath}
)

// Migration metrics.
const (
	mPeerH1     = "peer_h1_ms"
	mPeerH2     = "peer_h2_ms"
	mMigDown    = "down_ms"
	mMigSwitch  = "switch_ms"
	mMigDump    = "dump_ms"
	mMigRestore = "restore_ms"
	mMigResume  = "resume_ms"
	mMigPark    = "park_ms"
	mParked     = "parked"
	mImagesMiB  = "images_mib"
	mRSSMiB     = "rss_mib"
	mUsedMiB    = "used_mib"
	mTargetMs   = "target_ms"
	mOverTarget = "over_target"
	mBeforeMs   = "before_ms"
)

// The target for the peers' downtime: 150 ms and 3 ms per MiB of
// the container's memory.
const (
	targetBaseMs   = 150
	targetMsPerMiB = 3
)

var migrateInfo = ExperimentInfo{Name: MigrateName, Better: "lower", NoRatios: true, X: "container memory size",
	Title: fmt.Sprintf("Migration: a redis-server (without the library, and with it) filled to the case's memory moved h1 → h2 by `freeflow migrate` "+
		"while a peer on h1 and one on h2 each INCR every 2 ms on one connection, every reply checked; the peers' slowest reply "+
		"during the move (the downtime they see) against the target %d ms + %d ms per MiB of the server's RSS, and CRIU's parts, ms. "+
		"In the library row the h1 peer runs the library too, and its shared-memory connection is parked on TCP before the move (park; the server "+
		"runs on meanwhile, so it is not part of down). Transfer is 0: the hosts share one machine, so the "+
		"images are not copied (dump writes them to a tmpfs the restore reads); resume (connections back on fast paths) is not built yet",
		targetBaseMs, targetMsPerMiB),
	Metrics: []MetricInfo{
		{Key: mPeerH1, Label: "slowest reply, peer on h1 (source host) ms", Headline: true, Plot: true},
		{Key: mPeerH2, Label: "slowest reply, peer on h2 (destination host) ms", Headline: true, Plot: true},
		{Key: mMigDown, Label: "down (freeze to running) ms", Headline: true, Plot: true},
		{Key: mMigSwitch, Label: "switch (routes to h2) ms"},
		{Key: mMigDump, Label: "dump ms"},
		{Key: mMigRestore, Label: "restore ms"},
		{Key: mMigResume, Label: "resume (held packets in, processes on) ms"},
		{Key: mImagesMiB, Label: "images MiB"},
		{Key: mRSSMiB, Label: "server RSS MiB"},
		{Key: mUsedMiB, Label: "redis used_memory MiB"},
		{Key: mTargetMs, Label: fmt.Sprintf("target ms (%d + %d/MiB RSS)", targetBaseMs, targetMsPerMiB)},
		{Key: mOverTarget, Label: "runs a peer waited longer than the target", Sum: true},
		{Key: mBeforeMs, Label: "slowest reply before the move ms"},
		{Key: mMigPark, Label: "park (before the freeze) ms"},
		{Key: mParked, Label: "connections parked"},
	}}

// migrateCase is one memory size.
type migrateCase struct{ mib int }

func (c migrateCase) name() string { return sizeName(c.mib << 20) }

// migrateCases: the sizes; --quick (with --only migrate) the first.
func migrateCases(full bool) []migrateCase {
	cs := []migrateCase{{64}, {256}, {1024}}
	if !full {
		return cs[:1]
	}
	return cs
}

// The server is filled with DEBUG POPULATE: keys of populateValue bytes,
// about populateKeyBytes of redis's memory each (measured: 16000 keys
// take 64.5 MiB of used_memory); the report has the real figures.
const (
	populateValue    = 4000
	populateKeyBytes = 4170
)

func populateKeys(mib int) int { return (mib << 20) / populateKeyBytes }

const (
	migratePort = 6379
	// migrateSettle: the peers run this long before the move (their
	// slowest reply then is the machine's noise), and this long after it.
	migrateSettle = time.Second
	// migrateLimit bounds one run: filling 1 GiB, a move of seconds and
	// the peers' retransmissions take well under a minute.
	migrateLimit = 3 * time.Minute
	// readyLimit bounds a server's or a peer's start.
	readyLimit = 30 * time.Second
)

// migrateServer is the server's command line.
var migrateServer = []string{"redis-server", "--port", strconv.Itoa(migratePort), "--save", "", "--appendonly", "no",
	"--protected-mode", "no", "--bind", "0.0.0.0", "--enable-debug-command", "yes"}

// migratePeerScript is the peers' program (migrate_peer.py), Python for
// the reason connrate.py is: its socket calls go through libc.
//
//go:embed migrate_peer.py
var migratePeerScript []byte

const migratePeerFile = "migrate_peer.py"

// migrateRun is one run of the migration experiment.
type migrateRun struct {
	o      Options
	raw    *Raw
	cli    CLI
	tools  string
	prefix string            // of the run's container names
	peers  map[string]string // host -> the peer container there; "h1-lib": h1's with the library
}

// migrateMissing says what the experiment needs that this machine lacks.
func migrateMissing() string {
	for _, p := range []string{"criu", "redis-server", "redis-cli", "/usr/bin/python3", "nft"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Sprintf("needs %s (scripts/install-deps.sh installs it)", p)
		}
	}
	return ""
}

// runMigrate runs the migration experiment into raw, or notes why it
// cannot; dir is the run's result directory, which keeps the peers'
// program the samples' commands name.
func runMigrate(ctx context.Context, o Options, raw *Raw, dir string) (err error) {
	if why := migrateMissing(); why != "" {
		raw.Notes = append(raw.Notes, "the migration experiment did not run: "+why)
		return nil
	}
	raw.Paths = append(raw.Paths, migratePaths...)
	raw.Experiments = append(raw.Experiments, migrateInfo)
	if err := os.WriteFile(filepath.Join(dir, migratePeerFile), migratePeerScript, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", migratePeerFile, err)
	}
	c, err := openCluster(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, c.close()) }()
	raw.Setup.MigrateCluster = c.cli.Cluster
	t, err := makeTools("", o.Bin, c.cli.Cluster)
	if err != nil {
		return err
	}
	defer func() { err = joinErr(err, t.remove()) }()
	if err := os.WriteFile(filepath.Join(t.dir, migratePeerFile), migratePeerScript, 0o755); err != nil {
		return fmt.Errorf("write %s into the tools directory: %w", migratePeerFile, err)
	}
	r := &migrateRun{o: o, raw: raw, cli: c.cli, tools: t.dir, prefix: state.RandomName("mig", 3), peers: map[string]string{}}
	defer func() { err = joinErr(err, r.removePeers()) }()
	for _, h := range []string{"h1", "h2", "h1-lib"} {
		name := r.prefix + "-peer-" + h
		o := runOpts{Volumes: []string{t.dir}, FreeFlow: h == "h1-lib"}
		if err := c.cli.RunDetached(ctx, strings.TrimSuffix(h, "-lib"), name, tenant, o, []string{"sleep", "infinity"}); err != nil {
			return fmt.Errorf("start the migration's peer container on %s: %w", h, err)
		}
		r.peers[h] = name
	}
	raw.Setup.Servers = append(raw.Setup.Servers, "migrate: "+commandLine(migrateServer)+
		" in a container on h1 (--no-freeflow, and with the library), a new one for every run, then moved to h2")
	fmt.Fprintf(o.Log, "bench: migration on cluster %s\n", c.cli.Cluster)
	for rep := 1; rep <= o.Reps; rep++ {
		for _, mc := range migrateCases(!o.Quick) {
			for _, p := range migratePaths {
				r.add(r.measure(ctx, mc, p, rep))
				if ctx.Err() != nil {
					return fmt.Errorf("bench interrupted: %w", ctx.Err())
				}
			}
		}
	}
	return nil
}

func (r *migrateRun) removePeers() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for _, name := range r.peers {
		err = joinErr(err, r.cli.Remove(ctx, name))
	}
	return err
}

func (r *migrateRun) add(s Sample) {
	r.raw.Samples = append(r.raw.Samples, s)
	v := ""
	for _, m := range migrateInfo.Metrics {
		if x, ok := s.Metrics[m.Key]; ok && m.Headline {
			v += fmt.Sprintf(" %s=%s", m.Key, formatValue(x))
		}
	}
	if s.Error != "" {
		v = " FAILED: " + firstLine(s.Error)
	}
	fmt.Fprintf(r.o.Log, "bench: %s %s %s rep %d:%s\n", s.Experiment, s.Case, s.Path, s.Rep, v)
}

// measure runs one migration of a new server filled to c's memory and
// returns its sample; a failure (a peer's wrong reply or lost connection
// among them) is the sample's error.
func (r *migrateRun) measure(ctx context.Context, c migrateCase, p PathInfo, rep int) (s Sample) {
	lib := p.Name == pathMigrateLib
	name := fmt.Sprintf("%s-%d-%d", r.prefix, c.mib, rep)
	if lib {
		name += "-lib"
	}
	s = Sample{Experiment: MigrateName, Case: c.name(), X: float64(c.mib << 20), Path: p.Name, Rep: rep,
		Command: fmt.Sprintf("freeflow migrate %s --to h2 -o json, %s filled by redis-cli DEBUG POPULATE %d key %d; "+
			"peers on h1 and h2: python3 %s IP %d KEY", name, migrateServer[0], populateKeys(c.mib), populateValue, migratePeerFile, migratePort)}
	ctx, cancel := context.WithTimeout(ctx, migrateLimit)
	defer cancel()
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		if err := r.cli.Remove(rctx, name); err != nil && s.Error == "" {
			s.Error = fmt.Sprintf("remove the migrated server %s: %v", name, err)
		}
	}()
	m, out, err := r.move(ctx, name, c, lib)
	if err != nil {
		s.Error, s.Output = err.Error(), out
		return s
	}
	s.Metrics = m
	if m[mUsedMiB] < 0.9*float64(c.mib) {
		s.Suspect = append(s.Suspect, fmt.Sprintf("the server held %.0f MiB, not the case's %d", m[mUsedMiB], c.mib))
	}
	return s
}

// move starts the server, fills it, starts the peers, migrates the
// server mid-run and returns the metrics, or an error and the output
// that tells why.
func (r *migrateRun) move(ctx context.Context, name string, c migrateCase, lib bool) (map[string]float64, string, error) {
	srv, out, err := r.fill(ctx, name, c, lib)
	if err != nil {
		return nil, out, err
	}
	peers, err := r.startPeers(ctx, srv.ip, lib)
	defer func() {
		for _, p := range peers {
			p.stop()
		}
	}()
	if err != nil {
		return nil, "", err
	}
	for _, p := range peers {
		if err := p.waitReady(ctx); err != nil {
			return nil, p.output(), err
		}
	}
	if err := sleepCtx(ctx, migrateSettle); err != nil {
		return nil, "", err
	}
	for _, p := range peers {
		p.mark()
	}
	rep, merr := runCmd(ctx, r.cli.command("migrate", name, "--to", "h2", "-o", "json"))
	if merr == nil {
		merr = sleepCtx(ctx, migrateSettle)
	}
	results, pout, perr := finishPeers(ctx, peers)
	switch {
	case merr != nil:
		return nil, string(rep), merr
	case perr != nil:
		return nil, pout, perr
	}
	report, err := ParseMigrateReport(rep)
	if err != nil {
		return nil, string(rep), err
	}
	return migrateMetrics(report, srv.used, srv.rss, results["h1"], results["h2"]), "", nil
}

// filledServer is a server ready to move: its address and memory in
// bytes, redis's count and the kernel's.
type filledServer struct {
	ip        string
	used, rss float64
}

// fill starts the server on h1, with the library if lib, and fills it to
// c's memory.
func (r *migrateRun) fill(ctx context.Context, name string, c migrateCase, lib bool) (filledServer, string, error) {
	var srv filledServer
	if err := r.cli.RunDetached(ctx, "h1", name, tenant, runOpts{FreeFlow: lib}, migrateServer); err != nil {
		return srv, "", err
	}
	if err := r.waitRedis(ctx, name); err != nil {
		return srv, "", err
	}
	if _, err := r.redisCLI(ctx, name, "DEBUG", "POPULATE", strconv.Itoa(populateKeys(c.mib)), "key", strconv.Itoa(populateValue)); err != nil {
		return srv, "", err
	}
	info, err := r.redisCLI(ctx, name, "INFO", "memory")
	if err != nil {
		return srv, "", err
	}
	if srv.used, err = ParseRedisUsedMemory(info); err != nil {
		return srv, info, err
	}
	ci, err := r.containerInfo(ctx, name)
	if err != nil {
		return srv, "", err
	}
	srv.ip = ci.IP
	// The kernel's figure, not INFO's used_memory_rss: redis refreshes
	// that only every 100 ms.
	srv.rss, err = readRSS(ci.PID)
	return srv, "", err
}

// startPeers starts a peer of the server at ip on h1 and on h2; with lib,
// h1's runs the library.
func (r *migrateRun) startPeers(ctx context.Context, ip string, lib bool) ([]*migratePeer, error) {
	var peers []*migratePeer
	for _, h := range []string{"h1", "h2"} {
		argv := []string{"/usr/bin/python3", filepath.Join(r.tools, migratePeerFile), ip, strconv.Itoa(migratePort), "key-" + h}
		in := r.peers[h]
		if lib && h == "h1" {
			in = r.peers["h1-lib"]
		}
		p, err := startPeer(ctx, r.cli.Exec(in, argv), h)
		if err != nil {
			return peers, err
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// finishPeers ends every peer and returns their results by host, or the
// first failure and its output.
func finishPeers(ctx context.Context, peers []*migratePeer) (map[string]peerResult, string, error) {
	results := map[string]peerResult{}
	var first error
	var out string
	for _, p := range peers {
		res, err := p.finish(ctx)
		if err != nil && first == nil {
			first, out = err, p.output()
		}
		results[p.host] = res
	}
	return results, out, first
}

// migrateMetrics turns one move's figures into the sample's metrics.
func migrateMetrics(rep container.MigrateReport, used, rss float64, h1, h2 peerResult) map[string]float64 {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rssMiB := rss / (1 << 20)
	target := targetBaseMs + targetMsPerMiB*rssMiB
	m := map[string]float64{
		mPeerH1: h1.SlowestMs, mPeerH2: h2.SlowestMs,
		mMigDown: ms(rep.Down), mMigSwitch: ms(rep.Switch), mMigDump: ms(rep.Dump), mMigRestore: ms(rep.Restore), mMigResume: ms(rep.Resume),
		mImagesMiB: float64(rep.Images) / (1 << 20), mRSSMiB: rssMiB, mUsedMiB: used / (1 << 20),
		mTargetMs: target, mOverTarget: 0, mBeforeMs: max(h1.BeforeMs, h2.BeforeMs),
		mMigPark: ms(rep.Park), mParked: float64(rep.Parked),
	}
	if max(h1.SlowestMs, h2.SlowestMs) > target {
		m[mOverTarget] = 1
	}
	return m
}

// waitRedis waits until the server answers PING.
func (r *migrateRun) waitRedis(ctx context.Context, name string) error {
	deadline := time.Now().Add(readyLimit)
	for {
		out, err := r.redisCLI(ctx, name, "PING")
		if err == nil && strings.TrimSpace(out) == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server in %s does not answer PING after %v: %v %s", name, readyLimit, err, out)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// redisCLI runs redis-cli in the server's container.
func (r *migrateRun) redisCLI(ctx context.Context, name string, args ...string) (string, error) {
	out, err := runCmd(ctx, r.cli.Exec(name, append([]string{"redis-cli", "-p", strconv.Itoa(migratePort)}, args...)))
	return string(out), err
}

func (r *migrateRun) containerInfo(ctx context.Context, name string) (container.Info, error) {
	ps, err := r.cli.PS(ctx)
	if err != nil {
		return container.Info{}, err
	}
	for _, c := range ps {
		if c.Name == name && c.IP != "" && c.PID > 0 {
			return c, nil
		}
	}
	return container.Info{}, fmt.Errorf("`freeflow ps` shows no address or process for %s", name)
}

// readRSS is process pid's resident memory in bytes.
func readRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's memory: %w", err)
	}
	return ParseVmRSS(string(b))
}

// ParseVmRSS reads VmRSS, in bytes, from /proc/PID/status.
func ParseVmRSS(status string) (float64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if n, err := strconv.ParseFloat(f[0], 64); err == nil {
					return n * 1024, nil
				}
			}
			return 0, fmt.Errorf("/proc status: VmRSS is %q", strings.TrimSpace(v))
		}
	}
	return 0, errors.New("/proc status has no VmRSS")
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ParseRedisUsedMemory reads used_memory, in bytes, from `redis-cli INFO
// memory`.
func ParseRedisUsedMemory(info string) (float64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("redis INFO memory: used_memory is %q", v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("redis INFO memory has no used_memory: %q", lastLines(info, 5))
}

// ParseMigrateReport reads `freeflow migrate -o json`.
func ParseMigrateReport(out []byte) (container.MigrateReport, error) {
	var rep container.MigrateReport
	if err := json.Unmarshal(bytes.TrimSpace(out), &rep); err != nil {
		return rep, fmt.Errorf("`freeflow migrate -o json` printed no report: %w: %q", err, lastLines(string(out), 3))
	}
	if rep.DryRun || rep.Down <= 0 || rep.Dump <= 0 || rep.Restore <= 0 {
		return rep, fmt.Errorf("`freeflow migrate -o json` reports no move: %s", bytes.TrimSpace(out))
	}
	return rep, nil
}

// peerResult is what a peer printed at its end.
type peerResult struct {
	Requests  int     `json:"requests"`
	BeforeMs  float64 `json:"slowest_before_ms"`
	SlowestMs float64 `json:"slowest_ms"`
	Error     string  `json:"error"`
}

// ParseMigratePeer reads a peer's last line; a peer that saw a wrong
// reply or lost its connection said so there.
func ParseMigratePeer(out string) (peerResult, error) {
	var r peerResult
	line := strings.TrimSpace(out)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return r, fmt.Errorf("a migration peer printed no result: %w: %q", err, lastLines(out, 3))
	}
	if r.Error != "" {
		return r, fmt.Errorf("after %d right replies: %s", r.Requests, r.Error)
	}
	if r.Requests == 0 || r.SlowestMs <= 0 {
		return r, fmt.Errorf("a migration peer made no request during the move: %q", line)
	}
	return r, nil
}

// migratePeer is one running peer: `freeflow exec` of migrate_peer.py,
// its input held open until the move is over.
type migratePeer struct {
	host  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	ready chan struct{} // closed at its "ready" line
	done  chan struct{} // closed once it exited; then the fields below are set
	out   bytes.Buffer  // what it printed after "ready"
	// stderr is written while it runs: read only once done is closed.
	stderr  bytes.Buffer
	waitErr error
}

func startPeer(ctx context.Context, cmd *exec.Cmd, host string) (*migratePeer, error) {
	p := &migratePeer{host: host, cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.in = in
	cmd.Stderr = &p.stderr
	// Its own process group, killed whole on a timeout or Ctrl-C, as
	// runCmd does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the migration peer on %s: %w", host, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		isReady := false
		for sc.Scan() {
			if !isReady && sc.Text() == "ready" {
				isReady = true
				close(p.ready)
				continue
			}
			p.out.WriteString(sc.Text() + "\n")
		}
		p.waitErr = cmd.Wait() // after the last read of its output, as exec wants
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-p.done:
		}
	}()
	return p, nil
}

// waitReady waits for the peer's first right reply.
func (p *migratePeer) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("the migration peer on %s ended before its first reply: %v: %s", p.host, p.waitErr, p.failure())
	case <-time.After(readyLimit):
		return fmt.Errorf("the migration peer on %s had no reply within %v", p.host, readyLimit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mark tells the peer the move begins.
func (p *migratePeer) mark() { io.WriteString(p.in, "move\n") }

// finish ends the peer's input, waits for it to exit and reads its result.
func (p *migratePeer) finish(ctx context.Context) (peerResult, error) {
	p.in.Close()
	select {
	case <-p.done:
	case <-ctx.Done():
		return peerResult{}, fmt.Errorf("the migration peer on %s did not end: %w", p.host, ctx.Err())
	}
	res, err := ParseMigratePeer(p.out.String())
	if err != nil {
		return res, fmt.Errorf("the migration peer on %s: %w", p.host, err)
	}
	if p.waitErr != nil {
		return res, fmt.Errorf("the migration peer on %s: %w: %s", p.host, p.waitErr, p.failure())
	}
	return res, nil
}

// stop kills the peer if it still runs (a run that failed before its end).
func (p *migratePeer) stop() {
	p.in.Close()
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// output is what the peer printed, once it exited.
func (p *migratePeer) output() string {
	select {
	case <-p.done:
		return lastLines(p.out.String()+p.stderr.String(), 20)
	default:
		return ""
	}
}

// failure is the end of its output, once it exited.
func (p *migratePeer) failure() string {
	return lastLines(strings.TrimSpace(p.out.String()+"\n"+p.stderr.String()), 5)
}
