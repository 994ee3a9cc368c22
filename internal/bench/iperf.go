package bench

import (
	"encoding/json"
	"fmt"
)

// iperf3 throughput metrics.
const (
	mGbps        = "gbit_s"         // received, as the receiver counted it
	mRetrans     = "retransmits"    // sender side
	mBytes       = "bytes"          // received
	mCPUSender   = "cpu_sender_pct" // iperf3's own process CPU, % of one core (kept in raw.json)
	mCPUReceiver = "cpu_receiver_pct"
)

// iperfJSON is the part of `iperf3 -J` output the bench reads.
type iperfJSON struct {
	Error string `json:"error"`
	End   struct {
		SumSent struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   float64 `json:"retransmits"`
			Bytes         float64 `json:"bytes"`
		} `json:"sum_sent"`
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
			Bytes         float64 `json:"bytes"`
		} `json:"sum_received"`
		CPU struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
		SenderCC   string `json:"sender_tcp_congestion"`
		ReceiverCC string `json:"receiver_tcp_congestion"`
	} `json:"end"`
}

// iperfResult is a parsed `iperf3 -J` client run.
type iperfResult struct {
	Metrics    map[string]float64
	SenderCC   string
	ReceiverCC string
}

// ParseIperf3 reads the JSON an `iperf3 -c ... -J` client prints. iperf3
// can exit 0 with an "error" field, so the error is taken from the JSON.
func ParseIperf3(out []byte) (*iperfResult, error) {
	var j iperfJSON
	if err := json.Unmarshal(out, &j); err != nil {
		return nil, fmt.Errorf("iperf3 output is not JSON (was -J given?): %w", err)
	}
	if j.Error != "" {
		return nil, fmt.Errorf("iperf3 failed: %s", j.Error)
	}
	if j.End.SumReceived.Bytes == 0 {
		return nil, fmt.Errorf("iperf3 moved no data")
	}
	return &iperfResult{
		Metrics: map[string]float64{
			mGbps:        j.End.SumReceived.BitsPerSecond / 1e9,
			mRetrans:     j.End.SumSent.Retransmits,
			mBytes:       j.End.SumReceived.Bytes,
			mCPUSender:   j.End.CPU.HostTotal,
			mCPUReceiver: j.End.CPU.RemoteTotal,
		},
		SenderCC:   j.End.SenderCC,
		ReceiverCC: j.End.ReceiverCC,
	}, nil
}

// suspect names what makes a throughput sample doubtful: retransmits on a
// loss-free virtual path, or a congestion control other than the one the
// run set.
func (r *iperfResult) suspect(wantCC string) []string {
	var s []string
	if n := r.Metrics[mRetrans]; n > 0 {
		s = append(s, fmt.Sprintf("%.0f retransmits", n))
	}
	return append(s, r.ccSuspect(wantCC)...)
}

// ccSuspect names a congestion control other than the one the run set.
func (r *iperfResult) ccSuspect(wantCC string) []string {
	var s []string
	if wantCC != "" && (r.SenderCC != wantCC || r.ReceiverCC != wantCC) {
		s = append(s, fmt.Sprintf("congestion control %s/%s, not %s", r.SenderCC, r.ReceiverCC, wantCC))
	}
	return s
}
