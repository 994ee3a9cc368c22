package bench

// Job is one client run in the schedule.
type Job struct {
	Exp  Experiment
	Case Case
	Path Path
	Rep  int // 0 for warm-up
}

// Schedule orders the runs: an optional warm-up round (the first case of
// every experiment that does not warm up by itself, once per path,
// discarded), then reps rounds in which
// every case visits every path in turn (A B C D, A B C D, ...), so slow
// drift of a shared, noisy machine hits every path alike instead of
// whichever path happened to run last.
func Schedule(exps []Experiment, paths []Path, reps int, full, warmup bool) []Job {
	var jobs []Job
	if warmup {
		for _, e := range exps {
			for _, p := range paths {
				if e.SelfWarming {
					break
				}
				jobs = append(jobs, Job{Exp: e, Case: e.Cases(full)[0], Path: p})
			}
		}
	}
	for r := 1; r <= reps; r++ {
		for _, e := range exps {
			for _, c := range e.Cases(full) {
				for _, p := range paths {
					jobs = append(jobs, Job{Exp: e, Case: c, Path: p, Rep: r})
				}
			}
		}
	}
	return jobs
}
