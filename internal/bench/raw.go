package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// rawVersion changes when raw.json changes incompatibly.
const rawVersion = 1

// Raw is everything one bench run measured (raw.json). The report is
// rendered from it alone, so an old run can be re-rendered later.
type Raw struct {
	Version     int              `json:"version"`
	Started     time.Time        `json:"started"`
	Finished    time.Time        `json:"finished"`
	Machine     Machine          `json:"machine"`
	Setup       Setup            `json:"setup"`
	Paths       []PathInfo       `json:"paths"`
	Experiments []ExperimentInfo `json:"experiments"`
	Samples     []Sample         `json:"samples"`
	// Notes are run-level observations that make figures suspect.
	Notes []string `json:"notes,omitempty"`
}

// Setup records how the run was configured.
type Setup struct {
	Mode       string `json:"mode"` // "quick" or "full"
	RunSeconds int    `json:"run_seconds"`
	Reps       int    `json:"reps"`
	Order      string `json:"order"`
	Warmup     string `json:"warmup"`
	Cluster    string `json:"cluster"`
	OwnCluster bool   `json:"own_cluster"`
	// KubeCluster is the cluster the Kubernetes experiments brought up
	// (and removed), "" if they did not run.
	KubeCluster string `json:"kube_cluster,omitempty"`
	// MigrateCluster is the cluster the migration experiment ran on, ""
	// if it did not run.
	MigrateCluster string `json:"migrate_cluster,omitempty"`
	// CC is the congestion control the run asked for ("default" = leave
	// the namespaces as they were); CCUsed is what the namespaces had
	// while measuring, per namespace.
	CC     string            `json:"cc"`
	CCUsed map[string]string `json:"cc_used"`
	// CCAllowed says how the machine's allowed list was changed so the
	// namespaces could use CC, if it was.
	CCAllowed string `json:"cc_allowed,omitempty"`
	Pinning   string `json:"pinning"`
	// Servers run in the background in every server site for the whole run.
	Servers  []string `json:"servers"`
	ConnRate string   `json:"connrate"` // which program measures connection setup
}

// PathInfo describes one path as measured.
type PathInfo struct {
	Name   string `json:"name"`
	Group  string `json:"group"`
	Role   string `json:"role"`
	Server string `json:"server"`
	Client string `json:"client"`
	Target string `json:"target"`
	About  string `json:"about"`
	// Expect is the path `freeflow conns` must show for this path's
	// connections (FreeFlow paths); "" = not checked.
	Expect string `json:"expect,omitempty"`
}

// ExperimentInfo says how to present an experiment's samples.
type ExperimentInfo struct {
	Name    string       `json:"name"`
	Title   string       `json:"title"`
	Better  string       `json:"better"` // "lower" or "higher"
	Metrics []MetricInfo `json:"metrics"`
	// X names the plots' x axis (the cases' Sample.X); "" = no plot.
	X    string `json:"x,omitempty"`
	LogY bool   `json:"log_y,omitempty"`
	// NoRatios: the table has no ratio columns (the physical limits are
	// compared with nothing).
	NoRatios bool `json:"no_ratios,omitempty"`
	// CC is the congestion control the experiment ran under, when it is
	// not the run's (throughput-default-cc).
	CC string `json:"cc,omitempty"`
	// FallbackReasons: on checked FreeFlow paths the samples carry the
	// overlay reasons the agents counted (Sample.Fallback) and the
	// overlay ends (mOverlayEnds), and the table a column of the reasons.
	FallbackReasons bool `json:"fallback_reasons,omitempty"`
	// CPUVersus names the TCP experiment whose CPU s/GB the headline
	// ratios of this one's CPU s/GB are taken against (verbs bandwidth
	// against iperf3's throughput): on the group's baseline and reference
	// paths, at that experiment's largest case in the run.
	CPUVersus string `json:"cpu_versus,omitempty"`
}

// MetricInfo names one number a sample carries.
type MetricInfo struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	// Headline metrics get a median, min–max and a ratio to the baseline;
	// the others are summed or averaged in the table's extra columns.
	Headline bool `json:"headline"`
	// Sum makes the table show the total over the repetitions (counts of
	// bad events) rather than the median.
	Sum bool `json:"sum,omitempty"`
	// Better overrides the experiment's direction for this metric.
	Better string `json:"better,omitempty"`
	// Plot draws the metric against the experiment's x axis.
	Plot bool `json:"plot,omitempty"`
}

// better is the metric's direction: "lower" or "higher".
func (m MetricInfo) better(e ExperimentInfo) string {
	if m.Better != "" {
		return m.Better
	}
	return e.Better
}

// Sample is one run of one tool on one path.
type Sample struct {
	Experiment string             `json:"experiment"`
	Case       string             `json:"case,omitempty"` // e.g. the message size
	X          float64            `json:"x,omitempty"`    // the case on the plot's x axis
	Path       string             `json:"path"`
	Rep        int                `json:"rep"` // 1-based; 0 for warm-up runs
	Warmup     bool               `json:"warmup,omitempty"`
	Command    string             `json:"command"`
	Metrics    map[string]float64 `json:"metrics,omitempty"`
	Error      string             `json:"error,omitempty"`
	Suspect    []string           `json:"suspect,omitempty"`
	// Fallback counts the connection ends the agents put on the overlay
	// while the client ran, by reason (FallbackReasons experiments).
	Fallback map[string]uint64 `json:"fallback,omitempty"`
	Output   string            `json:"output,omitempty"` // kept only when the run failed
}

// SaveRaw writes raw as indented JSON.
func SaveRaw(path string, raw *Raw) error {
	b, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return fmt.Errorf("encode raw results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write raw results: %w", err)
	}
	return nil
}

// LoadRaw reads a raw.json written by SaveRaw.
func LoadRaw(path string) (*Raw, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read raw results: %w", err)
	}
	var raw Raw
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if raw.Version != rawVersion {
		return nil, fmt.Errorf("%s has raw.json version %d; this freeflow reads version %d", path, raw.Version, rawVersion)
	}
	return &raw, nil
}
