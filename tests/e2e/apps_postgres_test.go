package e2e

import (
	"crypto/md5"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// postgresSh makes a database in the container's private /tmp as the
// postgres user, lets every container of the cluster in without a
// password, and runs the server in the foreground ($0: the bin directory,
// $1: the container CIDR). The socket directory is /tmp, since the
// compiled-in one is read-only in containers.
const postgresSh = `set -e
runuser -u postgres -- "$0/initdb" -D /tmp/pg -A trust -U postgres >/dev/null
echo "host all all $1 trust" >>/tmp/pg/pg_hba.conf
exec runuser -u postgres -- "$0/postgres" -D /tmp/pg -k /tmp -c listen_addresses=* -c fsync=off`

// pgRows is how many rows the bulk query returns (about 800 KB).
const pgRows = 20000

// TestPostgres: pgbench loads its tables (client-side COPY) and the rows
// arrive intact, a bulk query's result arrives intact, and a 2-second
// pgbench run has no failed transaction, same host and cross host, on the
// overlay and on the fast paths. The server forks a backend per connection.
func TestPostgres(t *testing.T) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if m := testenv.Missing("pgbench", "psql", "runuser"); m != "" || len(bins) == 0 {
		t.Skip("needs postgresql, pgbench, psql and runuser (run scripts/install-deps.sh)")
	}
	c := newCluster(t, 2)
	onEveryPath(t, c, func(t *testing.T, m mode) string {
		srv := testenv.RandomName("pg", 4)
		c.StartDetached(t, "h1", srv, m.flags, "sh", "-c", postgresSh, filepath.Dir(bins[0]), state.OverlayCIDR)
		c.WaitListening(t, srv, 5432)
		return srv
	}, func(t *testing.T, host, srv string, flags []string) {
		psql := func(query string) string {
			return runClient(t, c, host, flags, "psql", "-h", srv, "-U", "postgres", "-XAtc", query, "postgres").Stdout
		}
		runClient(t, c, host, flags, "pgbench", "-h", srv, "-U", "postgres", "-i", "-s", "1", "-q", "postgres")
		if got := psql("select count(*), sum(aid) from pgbench_accounts"); got != "100000|5000050000\n" {
			t.Fatalf("pgbench_accounts after pgbench -i: count|sum(aid) = %q, want 100000|5000050000", got)
		}
		if got := psql(fmt.Sprintf("select i, md5(i::text) from generate_series(1, %d) i", pgRows)); got != md5Rows(pgRows) {
			t.Fatalf("bulk query: %d bytes came back, not the %d rows of i|md5(i)", len(got), pgRows)
		}
		pgbench(t, c, host, srv, flags)
	})
}

// md5Rows is psql's unaligned output of rows i|md5(i) for i in 1..n.
func md5Rows(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d|%x\n", i, md5.Sum([]byte(fmt.Sprint(i))))
	}
	return b.String()
}

var (
	pgbenchDone   = regexp.MustCompile(`number of transactions actually processed: [1-9]`)
	pgbenchFailed = regexp.MustCompile(`number of failed transactions: 0 `)
)

// pgbench runs two clients for two seconds and checks that transactions
// were processed and none failed.
func pgbench(t *testing.T, c *testenv.Cluster, host, srv string, flags []string) {
	out := runClient(t, c, host, flags, "pgbench", "-h", srv, "-U", "postgres", "-T", "2", "-c", "2", "postgres").Stdout
	if !pgbenchDone.MatchString(out) || !pgbenchFailed.MatchString(out) {
		t.Fatalf("pgbench: want transactions processed and none failed:\n%s", out)
	}
}

// TestPostgresBackendsBackOnShm: postgres forks a backend per connection
// after accept(), and the postmaster closes its copy: each same-host
// library client's connection, moved down to a socket pair at the fork,
// comes back onto shared memory while pgbench runs (before, it stayed a
// pair: slower, and its container could not migrate), and no transaction
// fails. pgbench runs at 300 transactions a second: at full speed a try
// seldom found a connection quiet, and tries back off (1, 2, 4 s), so the
// 10 s wait saw both back in about 3 runs of 4.
func TestPostgresBackendsBackOnShm(t *testing.T) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if m := testenv.Missing("pgbench", "runuser"); m != "" || len(bins) == 0 {
		t.Skip("needs postgresql, pgbench and runuser (run scripts/install-deps.sh)")
	}
	c := newCluster(t, 1)
	srv := "pgfork"
	c.StartDetached(t, "h1", srv, nil, "sh", "-c", postgresSh, filepath.Dir(bins[0]), state.OverlayCIDR)
	c.WaitListening(t, srv, 5432)
	runClient(t, c, "h1", nil, "pgbench", "-h", srv, "-U", "postgres", "-i", "-s", "1", "-q", "postgres")
	c.StartDetached(t, "h1", "bench", nil, "pgbench", "-h", srv, "-U", "postgres", "-T", "12", "-R", "300", "-c", "2", "postgres")
	testenv.WaitFor(t, "pgbench's two connections on shm, both ends", func() bool {
		n := 0
		for _, e := range connsOf(t, c, "bench") {
			if e.Path == "shm" {
				n++
			}
		}
		return n == 4
	})
	testenv.WaitWithin(t, 20*time.Second, "pgbench to finish", func() bool { return containerOf(t, c, "bench").Status == "exited" })
	if out := c.MustFF(t, "logs", "bench"); !pgbenchDone.MatchString(out) || !pgbenchFailed.MatchString(out) {
		t.Fatalf("pgbench: want transactions processed and none failed:\n%s", out)
	}
}
