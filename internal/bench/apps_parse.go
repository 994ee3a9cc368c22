package bench

import (
	"encoding/csv"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ParseRedisBenchmark reads `redis-benchmark --csv` (Redis 7): one line per
// test with requests/s and latency percentiles in ms.
func ParseRedisBenchmark(out string) (map[string]float64, error) {
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) < 2 {
		return nil, fmt.Errorf("redis-benchmark output is not its CSV table (%v): %s", err, lastLines(strings.TrimSpace(out), 3))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	rps, okR := col["rps"]
	p99, okP := col["p99_latency_ms"]
	if !okR || !okP {
		return nil, fmt.Errorf("redis-benchmark CSV lacks rps or p99_latency_ms columns: %v", recs[0])
	}
	m := map[string]float64{}
	for _, r := range recs[1:] {
		if len(r) <= max(rps, p99) {
			continue
		}
		test := strings.ToLower(r[0])
		m[test+"_rps"], m[test+"_p99_ms"] = atof(r[rps]), atof(r[p99])
	}
	if m["set_rps"] == 0 || m["get_rps"] == 0 {
		return nil, fmt.Errorf("redis-benchmark reported no SET or GET rate: %v", m)
	}
	return m, nil
}

var (
	wrkRateRE   = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPctRE    = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkErrorsRE = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xxRE = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// ParseWrk reads `wrk --latency` output: requests/s, the median and p99
// latency (in ms), and socket errors plus non-2xx answers.
func ParseWrk(out string) (map[string]float64, error) {
	r := wrkRateRE.FindStringSubmatch(out)
	if r == nil {
		return nil, fmt.Errorf("wrk output has no Requests/sec: %s", lastLines(strings.TrimSpace(out), 3))
	}
	m := map[string]float64{"rps": atof(r[1])}
	for _, p := range wrkPctRE.FindAllStringSubmatch(out, -1) {
		m["p"+p[1]+"_ms"] = atof(p[2]) * map[string]float64{"us": 1e-3, "ms": 1, "s": 1e3}[p[3]]
	}
	if _, ok := m["p99_ms"]; !ok {
		return nil, fmt.Errorf("wrk output has no latency distribution; was --latency given?")
	}
	if e := wrkErrorsRE.FindStringSubmatch(out); e != nil {
		for _, n := range e[1:] {
			m["errors"] += atof(n)
		}
	}
	if e := wrkNon2xxRE.FindStringSubmatch(out); e != nil {
		m["errors"] += atof(e[1])
	}
	return m, nil
}

var memaslapRE = regexp.MustCompile(`Run time: ([0-9.]+)s Ops: (\d+) TPS: (\d+)`)

// ParseMemaslap reads memaslap's (memcaslap's) closing line.
func ParseMemaslap(out string) (map[string]float64, error) {
	r := memaslapRE.FindStringSubmatch(out)
	if r == nil || atof(r[2]) == 0 {
		return nil, fmt.Errorf("memaslap did no operation: %s", lastLines(strings.TrimSpace(out), 3))
	}
	return map[string]float64{"ops": atof(r[3])}, nil
}

var (
	pgTPSRE     = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	pgLatencyRE = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
	pgFailedRE  = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

// ParsePgbench reads pgbench's summary.
func ParsePgbench(out string) (map[string]float64, error) {
	t := pgTPSRE.FindStringSubmatch(out)
	if t == nil {
		return nil, fmt.Errorf("pgbench output has no tps: %s", lastLines(strings.TrimSpace(out), 3))
	}
	m := map[string]float64{"tps": atof(t[1])}
	if l := pgLatencyRE.FindStringSubmatch(out); l != nil {
		m["latency_ms"] = atof(l[1])
	}
	if f := pgFailedRE.FindStringSubmatch(out); f != nil {
		m["failed"], _ = strconv.ParseFloat(f[1], 64)
	}
	return m, nil
}
