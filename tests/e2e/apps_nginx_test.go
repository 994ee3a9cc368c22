package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// nginxConf runs nginx in the foreground from a read-only mount at
// /run/www: every path it writes (pid, temp files) is under the
// container's private /tmp, since nginx-light's compiled-in temp paths are
// under /var/lib/nginx, which containers see read-only. sendfile is on, as
// in Debian's stock configuration, so files go out through sendfile(2).
const nginxConf = `
daemon off;
user root;
worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path /tmp/body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  server { listen 80; root /run/www; }
}
`

// TestNginx: curl downloads a random 1 MiB file from nginx intact, and wrk
// gets only 2xx answers, same host and cross host, on the overlay and on
// the fast paths.
func TestNginx(t *testing.T) {
	if m := testenv.Missing("nginx", "curl", "wrk"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	www := filepath.Dir(hostFile(t, "nginx.conf", []byte(nginxConf)))
	file := randomBytes(1 << 20)
	must(t, os.WriteFile(filepath.Join(www, "file.bin"), file, 0o644), "write file.bin")
	sum := sha256.Sum256(file)
	onEveryPath(t, c, func(t *testing.T, m mode) string {
		srv := testenv.RandomName("nginx", 4)
		c.StartDetached(t, "h1", srv, append(volume(www, "/run/www"), m.flags...), "nginx", "-e", "stderr", "-c", "/run/www/nginx.conf")
		c.WaitListening(t, srv, 80)
		return srv
	}, func(t *testing.T, host, srv string, flags []string) {
		curlIntact(t, c, host, "http://"+srv+"/file.bin", hex.EncodeToString(sum[:]), flags)
		wrkAll2xx(t, c, host, "http://"+srv+"/file.bin", flags)
	})
}

// curlIntact downloads url with curl and compares the sha256 of what
// arrived with want.
func curlIntact(t *testing.T, c *testenv.Cluster, host, url, want string, flags []string) {
	out := runClient(t, c, host, flags, "sh", "-c", `curl -sSf -o /tmp/f "$0" && sha256sum /tmp/f`, url).Stdout
	if got, _, _ := strings.Cut(out, " "); got != want {
		t.Fatalf("curl %s: sha256 %q, want %s (the served file's)", url, out, want)
	}
}

var wrkRequests = regexp.MustCompile(`(?m)^\s*([1-9][0-9]*) requests in `)

// wrkAll2xx loads url with wrk for a second and checks that requests
// completed, none with a non-2xx/3xx status or a socket error.
func wrkAll2xx(t *testing.T, c *testenv.Cluster, host, url string, flags []string) {
	out := runClient(t, c, host, flags, "wrk", "-d1s", "-c4", "-t1", url).Stdout
	if !wrkRequests.MatchString(out) || strings.Contains(out, "Non-2xx") || strings.Contains(out, "Socket errors") {
		t.Fatalf("wrk %s: want requests completed, none failed:\n%s", url, out)
	}
}
