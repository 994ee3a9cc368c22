// Package etcdproc runs etcd server processes (Debian's etcd-server) and
// waits for them: the command line of one member and a health check.
package etcdproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Binary is Debian's etcd server (package etcd-server).
const Binary = "/usr/bin/etcd"

// Config describes one member of an etcd cluster run from Binary.
type Config struct {
	Name           string // member name, unique within the etcd cluster
	DataDir        string // kept across restarts: a member restarted on it rejoins with its data
	ClientURL      string // listened on and advertised, e.g. http://10.99.0.2:2379
	PeerURL        string // listened on and advertised, e.g. http://10.99.0.2:2380
	InitialCluster string // "name=peerURL,..." of all members; empty: this member alone
	Token          string // initial cluster token; empty: "freeflow"
	LogFile        string // etcd's own log (warnings and worse); empty: stderr
}

// Args returns the command line (Binary first) that runs the member
// described by c. The initial-cluster flags only matter on first start; a
// restart on the same DataDir ignores them.
func Args(c Config) []string {
	initial := c.InitialCluster
	if initial == "" {
		initial = c.Name + "=" + c.PeerURL
	}
	token := c.Token
	if token == "" {
		token = "freeflow"
	}
	logOut := c.LogFile
	if logOut == "" {
		logOut = "stderr"
	}
	return []string{
		Binary,
		"--name=" + c.Name,
		"--data-dir=" + c.DataDir,
		"--listen-client-urls=" + c.ClientURL,
		"--advertise-client-urls=" + c.ClientURL,
		"--listen-peer-urls=" + c.PeerURL,
		"--initial-advertise-peer-urls=" + c.PeerURL,
		"--initial-cluster=" + initial,
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + token,
		"--logger=zap",
		"--log-level=warn",
		"--log-outputs=" + logOut,
	}
}

// Dialer creates a connection to addr (host:port), e.g. inside another
// network namespace.
type Dialer = func(ctx context.Context, addr string) (net.Conn, error)

// WaitHealthy polls the member's /health endpoint at endpoint (a client URL
// or host:port) until it reports healthy, which needs a leader, or ctx
// ends. dial may be nil; the CLI passes one that dials inside the fabric
// namespace.
func WaitHealthy(ctx context.Context, endpoint string, dial Dialer) error {
	url := strings.TrimSuffix(endpoint, "/") + "/health"
	if !strings.Contains(endpoint, "://") {
		url = "http://" + url
	}
	client := healthClient(dial)
	defer client.CloseIdleConnections()
	var last error
	for {
		if last = checkHealth(ctx, client, url); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd at %s did not become healthy (last: %v); see its log: %w", endpoint, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthClient(dial Dialer) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	if dial != nil {
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) }
	}
	return &http.Client{Transport: tr, Timeout: time.Second}
}

func checkHealth(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
