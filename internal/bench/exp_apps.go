package bench

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
)

// Applications: each is a real server run in every server site, with its
// configuration on the command line (or written into $D by the server's own
// command), and Debian's own load tool as the client.

var redisBench = Experiment{
	Info: ExperimentInfo{Name: "redis", Better: "higher",
		Title: "redis: redis-benchmark, 20 connections, SET and GET, requests/s and p99 ms",
		Metrics: []MetricInfo{
			{Key: "set_rps", Label: "SET req/s", Headline: true},
			{Key: "get_rps", Label: "GET req/s", Headline: true},
			{Key: "set_p99_ms", Label: "SET p99 ms", Headline: true, Better: "lower"},
			{Key: "get_p99_ms", Label: "GET p99 ms", Headline: true, Better: "lower"},
		}},
	Server: func(toolEnv) Server {
		return Server{Port: portRedis, Shell: fmt.Sprintf(
			`exec redis-server --port %d --bind 0.0.0.0 --protected-mode no --save '' --appendonly no --dir "$D"`, portRedis)}
	},
	Cases:      func(bool) []Case { return []Case{{Name: "20 conns"}} },
	MaxSeconds: 1,
	// redis-benchmark counts requests, not seconds: ~50k requests/s per
	// test on a container path, so this lasts about the run's seconds.
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("redis-benchmark -h %s -p %d -c 20 -t set,get -n %d --csv", d.Addr, portRedis, 25000*seconds)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseRedisBenchmark(string(out))
		return m, nil, err
	},
}

// nginxConf serves a fixed short body; paths are relative to the -p prefix
// ($D/nginx/), so the same text works in every site.
const nginxConf = `worker_processes 1;
daemon off;
pid nginx.pid;
error_log stderr;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path tmp; proxy_temp_path tmp; fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;
  server { listen %d; location / { return 200 "hello from freeflow bench\n"; } }
}
`

var nginxBench = Experiment{
	Info: ExperimentInfo{Name: "nginx", Better: "higher",
		Title: "nginx + wrk: 1 thread, 16 connections, a 26-byte page; requests/s and latency",
		Metrics: []MetricInfo{
			{Key: "rps", Label: "req/s", Headline: true},
			{Key: "p50_ms", Label: "p50 ms"},
			{Key: "p99_ms", Label: "p99 ms", Headline: true, Better: "lower"},
		}},
	Server: func(toolEnv) Server {
		conf := fmt.Sprintf(nginxConf, portNginx)
		return Server{Port: portNginx, Shell: `mkdir -p "$D/nginx/tmp" && printf %s ` + commandLine([]string{conf}) +
			` >"$D/nginx/nginx.conf" && exec nginx -p "$D/nginx/" -c nginx.conf -e stderr`}
	},
	Cases:      func(bool) []Case { return []Case{{Name: "16 conns"}} },
	MaxSeconds: 1,
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("wrk -t1 -c16 -d%ds --latency http://%s:%d/", seconds, d.Addr, portNginx)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseWrk(string(out))
		if err != nil {
			return nil, nil, err
		}
		var s []string
		if m["errors"] > 0 {
			s = append(s, fmt.Sprintf("%.0f socket errors or non-2xx answers", m["errors"]))
		}
		return m, s, nil
	},
}

var memcachedBench = Experiment{
	Info: ExperimentInfo{Name: "memcached", Better: "higher",
		Title: "memcached + memaslap (libmemcached-tools' memcaslap): 1 thread, 16 connections, 90% get / 10% set; operations/s",
		Metrics: []MetricInfo{
			{Key: "ops", Label: "ops/s", Headline: true},
		}},
	Server:     memcachedServer,
	Cases:      func(bool) []Case { return []Case{{Name: "16 conns"}} },
	MaxSeconds: 1,
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("memcaslap -s %s:%d -T 1 -c 16 -t %ds", d.Addr, portMemcached, seconds)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParseMemaslap(string(out))
		return m, nil, err
	},
}

// memcachedServer is the memcached both memcached experiments measure
// (one process: the bench starts one server per port).
var memcachedServer = func(toolEnv) Server {
	return Server{Port: portMemcached, Shell: fmt.Sprintf("exec memcached -u root -l 0.0.0.0 -p %d -t 1 -m 64", portMemcached)}
}

// memcachedLatency times every request (ffmem memcached): memaslap, the
// throughput experiment's client, reports no percentiles.
var memcachedLatency = Experiment{
	Info: ExperimentInfo{Name: "memcached-latency", Better: "lower",
		Title: "memcached + ffmem memcached: 16 connections, one request outstanding on each, 90% get / 10% set of 1 KiB values; per-request latency µs and requests/s",
		Metrics: []MetricInfo{
			{Key: mP50, Label: "p50 µs", Headline: true},
			{Key: mP99, Label: "p99 µs", Headline: true},
			{Key: "ops", Label: "requests/s", Better: "higher"},
		}},
	UsesFFMem:  true,
	Server:     memcachedServer,
	Cases:      func(bool) []Case { return []Case{{Name: "16 conns"}} },
	MaxSeconds: 1,
	Client: func(e toolEnv, d dial, _ Case, seconds int) []string {
		return []string{e.ffmem(), "memcached", "--tcp", fmt.Sprintf("%s:%d", d.Addr, portMemcached),
			"--conns", "16", "--seconds", strconv.Itoa(seconds)}
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		recs, err := ffmemKind(string(out), "memcached")
		if err != nil {
			return nil, nil, err
		}
		v := recs[0].V
		var suspect []string
		if v["misses"] > 0 {
			// A miss is answered faster than a hit: the figures are not the workload's.
			suspect = append(suspect, fmt.Sprintf("%.0f of %.0f requests were gets that missed", v["misses"], v["requests"]))
		}
		return map[string]float64{mP50: v["p50_us"], mP99: v["p99_us"], "ops": v["ops_s"]}, suspect, nil
	},
}

// postgresBin finds the newest installed PostgreSQL server's bin directory.
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	if len(dirs) == 0 {
		return "/usr/lib/postgresql/15/bin"
	}
	return dirs[len(dirs)-1]
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// postgresServer makes a data directory in $D as the postgres user, loads
// pgbench's tables while listening on a Unix socket only, then serves TCP:
// the server listens on the port only once it is ready to be measured.
const postgresServer = `set -e; B=%[1]s; AS="setpriv --reuid=postgres --regid=postgres --init-groups"
install -d -o postgres -m 700 "$D/pg"
$AS $B/initdb -D "$D/pg/data" -A trust -U postgres --no-sync >"$D/pg/initdb.log"
printf 'local all all trust\nhost all all 0.0.0.0/0 trust\n' >"$D/pg/hba.conf"
O="-D $D/pg/data -k $D/pg -p %[2]d -c fsync=off -c hba_file=$D/pg/hba.conf"
$AS $B/postgres $O -c listen_addresses= & P=$!
i=0; until $B/pg_isready -q -h "$D/pg" -p %[2]d -U postgres; do i=$((i+1)); [ $i -lt 200 ]; sleep 0.1; done
$AS $B/pgbench -i -s 1 -q -h "$D/pg" -p %[2]d -U postgres postgres
kill -INT $P; wait $P || true
exec $AS $B/postgres $O -c listen_addresses='*'`

var pgBench = Experiment{
	Info: ExperimentInfo{Name: "pgbench", Better: "higher",
		Title: "PostgreSQL pgbench, select-only (-S), 4 clients, scale 1, fsync off; transactions/s",
		Metrics: []MetricInfo{
			{Key: "tps", Label: "tps", Headline: true},
			{Key: "latency_ms", Label: "mean latency ms"},
		}},
	Server: func(toolEnv) Server {
		return Server{Port: portPostgres, Shell: fmt.Sprintf(postgresServer, postgresBin(), portPostgres)}
	},
	Cases:      func(bool) []Case { return []Case{{Name: "4 clients"}} },
	MaxSeconds: 1,
	Client: func(_ toolEnv, d dial, _ Case, seconds int) []string {
		return split("pgbench -h %s -p %d -U postgres -S -c 4 -j 1 -T %d postgres", d.Addr, portPostgres, seconds)
	},
	Parse: func(_ toolEnv, out []byte) (map[string]float64, []string, error) {
		m, err := ParsePgbench(string(out))
		if err != nil {
			return nil, nil, err
		}
		var s []string
		if m["failed"] > 0 {
			s = append(s, fmt.Sprintf("%.0f failed transactions", m["failed"]))
		}
		return m, s, nil
	},
}
