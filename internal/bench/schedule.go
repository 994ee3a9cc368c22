package bench

// Job is one client run in the schedule.
type Job struct {
	Exp  Experiment
	Case Case
	Path Path
	Rep  int // 0 for warm-up
}

// Schedule orders the runs: an optional warm-up round (one discarded run
// per path: the first case of the first experiment on it that does not
// warm up by itself), then reps rounds in which every case visits every path it
// applies to in turn (A B C D, A B C D, ...), so slow drift of a shared,
// noisy machine hits every path alike instead of whichever path happened
// to run last.
func Schedule(exps []Experiment, paths []Path, reps int, full, warmup bool) []Job {
	var jobs []Job
	if warmup {
		for _, p := range paths {
			for _, e := range exps {
				if !e.SelfWarming && e.applies(p) {
					jobs = append(jobs, Job{Exp: e, Case: e.jobCases(full)[0], Path: p})
					break
				}
			}
		}
	}
	for r := 1; r <= reps; r++ {
		for _, e := range exps {
			if r > e.reps(reps) {
				continue
			}
			for _, c := range e.jobCases(full) {
				for _, p := range paths {
					if e.applies(p) {
						jobs = append(jobs, Job{Exp: e, Case: c, Path: p, Rep: r})
					}
				}
			}
		}
	}
	return jobs
}

// warmupNote says how the run warms up, for the report.
func warmupNote(quick bool) string {
	if quick {
		return "sockperf discards its own first 400 ms, ffmem pingpong a tenth of its time; the quick run has no other warm-up"
	}
	return "sockperf discards its own first 400 ms, ffmem pingpong a tenth of its time; every path gets one discarded run (the first case of its first other experiment) before the first round"
}

// pairsPerPath is, per path, the most concurrent pairs any selected
// experiment runs on it.
func pairsPerPath(exps []Experiment, paths []Path, full bool) map[string]int {
	out := map[string]int{}
	for _, p := range paths {
		for _, e := range exps {
			if !e.applies(p) {
				continue
			}
			for _, c := range e.Cases(full) {
				out[p.Name] = max(out[p.Name], c.pairs())
			}
		}
	}
	return out
}
