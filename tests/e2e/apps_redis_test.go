package e2e

import (
	"encoding/hex"
	"regexp"
	"strconv"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestRedis: redis-cli stores a random 60 KB value in redis-server and
// reads it back intact, and redis-benchmark completes its SETs and GETs,
// same host and cross host, on the overlay and on the fast paths.
func TestRedis(t *testing.T) {
	if m := testenv.Missing("redis-server", "redis-cli", "redis-benchmark"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	onEveryPath(t, c, func(t *testing.T, m mode) string {
		srv := testenv.RandomName("redis", 4)
		c.StartDetached(t, "h1", srv, m.flags, "redis-server", "--port", "6379", "--bind", "0.0.0.0",
			"--protected-mode", "no", "--save", "", "--appendonly", "no")
		c.WaitListening(t, srv, 6379)
		return srv
	}, func(t *testing.T, host, srv string, flags []string) {
		redisValueIntact(t, c, host, srv, flags)
		redisBenchmark(t, c, host, srv, flags)
	})
}

// redisValueIntact SETs a random value (hex, so redis-cli prints it as is)
// and GETs it back with a second connection.
func redisValueIntact(t *testing.T, c *testenv.Cluster, host, srv string, flags []string) {
	value := hex.EncodeToString(randomBytes(30 << 10))
	vol := volume(hostFile(t, "value", []byte(value)), "/run/value")
	out := runClient(t, c, host, append(vol, flags...), "sh", "-c",
		`redis-cli -h "$0" -x SET k </run/value && redis-cli -h "$0" --raw GET k`, srv).Stdout
	if want := "OK\n" + value + "\n"; out != want {
		t.Fatalf("redis-cli SET then GET of a %d-byte value printed %d bytes, not OK and the value", len(value), len(out))
	}
}

var redisRate = regexp.MustCompile(`(SET|GET): ([0-9.]+) requests per second`)

// redisBenchmark runs a short redis-benchmark and checks that both of its
// tests finished with a positive rate.
func redisBenchmark(t *testing.T, c *testenv.Cluster, host, srv string, flags []string) {
	out := runClient(t, c, host, flags, "redis-benchmark", "-h", srv, "-q", "-n", "3000", "-c", "4", "-d", "1024", "-t", "set,get").Stdout
	done := map[string]bool{}
	for _, m := range redisRate.FindAllStringSubmatch(out, -1) {
		if rps, err := strconv.ParseFloat(m[2], 64); err == nil && rps > 0 {
			done[m[1]] = true
		}
	}
	if !done["SET"] || !done["GET"] {
		t.Fatalf("redis-benchmark did not report a rate for both SET and GET:\n%s", out)
	}
}
