package bench

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// connrateScript is the connection setup rate program (connrate.py). Python
// rather than a helper mode of this Go binary: it makes its socket calls
// through libc, so the FreeFlow preload library will see them the way it
// sees a real application's; a static Go binary would bypass it.
//
//go:embed connrate.py
var connrateScript []byte

// Connection rate metrics.
const (
	mConnRate   = "conn_per_s"
	mConnErrors = "conn_errors"
	// Each connection's time, connect to close (client-late only).
	mConnMs    = "conn_ms"
	mConnMsP99 = "conn_ms_p99"
)

// ParseConnRate reads the JSON line `connrate.py client` or `client-late`
// prints; the per-connection times are there for client-late only.
func ParseConnRate(out string) (map[string]float64, string, error) {
	var r struct {
		Connections float64  `json:"connections"`
		Errors      float64  `json:"errors"`
		Rate        float64  `json:"rate"`
		ConnMs      *float64 `json:"conn_ms_p50"`
		ConnMsP99   *float64 `json:"conn_ms_p99"`
		LastError   string   `json:"last_error"`
	}
	line := strings.TrimSpace(out)
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return nil, "", fmt.Errorf("connrate output is not its JSON line: %w", err)
	}
	if r.Connections == 0 {
		return nil, "", fmt.Errorf("connrate made no connection: %s", r.LastError)
	}
	m := map[string]float64{mConnRate: r.Rate, mConnErrors: r.Errors}
	if r.ConnMs != nil && r.ConnMsP99 != nil {
		m[mConnMs], m[mConnMsP99] = *r.ConnMs, *r.ConnMsP99
	}
	return m, r.LastError, nil
}

// connrateSuspect names failed connections in an otherwise usable sample.
func connrateSuspect(m map[string]float64, lastErr string) []string {
	if m[mConnErrors] == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%.0f failed connections (last: %s)", m[mConnErrors], lastErr)}
}
