package bench

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Sockperf latency metrics. sockperf ping-pong reports one-way latency,
// i.e. half the measured round trip, in microseconds.
const (
	mP50  = "p50_us"
	mP99  = "p99_us"
	mAvg  = "avg_us"
	mObs  = "observations"
	mLost = "lost_msgs" // dropped + duplicated + out-of-order
)

var (
	ansiRE       = regexp.MustCompile(`\x1b\[[0-9;]*m`)
	percentileRE = regexp.MustCompile(`percentile\s+([0-9.]+)\s*=\s*([0-9.]+)`)
	avgRE        = regexp.MustCompile(`avg-latency=([0-9.]+)`)
	validRE      = regexp.MustCompile(`\[Valid Duration\].*ReceivedMessages=([0-9]+)`)
	lostRE       = regexp.MustCompile(`# dropped messages = ([0-9]+); # duplicated messages = ([0-9]+); # out-of-order messages = ([0-9]+)`)
	errorRE      = regexp.MustCompile(`sockperf: ERROR: (.*)`)
)

// ParseSockperf reads the output of `sockperf ping-pong` and returns the
// median, p99 and mean latency, how many round trips were observed and how
// many messages were lost or reordered.
func ParseSockperf(out string) (map[string]float64, error) {
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(ansiRE.ReplaceAllString(out, "")))
	for sc.Scan() {
		line := sc.Text()
		if e := errorRE.FindStringSubmatch(line); e != nil {
			return nil, fmt.Errorf("sockperf failed: %s", strings.TrimSpace(e[1]))
		}
		if p := percentileRE.FindStringSubmatch(line); p != nil {
			switch p[1] {
			case "50.000":
				m[mP50] = atof(p[2])
			case "99.000":
				m[mP99] = atof(p[2])
			}
		}
		if a := avgRE.FindStringSubmatch(line); a != nil {
			m[mAvg] = atof(a[1])
		}
		if v := validRE.FindStringSubmatch(line); v != nil {
			m[mObs] = atof(v[1])
		}
		if l := lostRE.FindStringSubmatch(line); l != nil {
			m[mLost] = atof(l[1]) + atof(l[2]) + atof(l[3])
		}
	}
	for _, k := range []string{mP50, mP99, mObs} {
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("sockperf output has no %s; is this `sockperf ping-pong` output?", k)
		}
	}
	return m, nil
}

// sockperfSuspect names what makes a latency sample doubtful.
func sockperfSuspect(m map[string]float64) []string {
	var s []string
	if m[mLost] > 0 {
		s = append(s, fmt.Sprintf("%.0f messages dropped, duplicated or reordered", m[mLost]))
	}
	if m[mObs] < 1000 {
		s = append(s, fmt.Sprintf("only %.0f round trips observed", m[mObs]))
	}
	return s
}

// atof parses a number the regexps already matched.
func atof(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
