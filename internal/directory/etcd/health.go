package etcd

import (
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// healthState guards the Health the sync loop reports.
type healthState struct {
	mu sync.Mutex
	h  directory.Health
}

func newHealthState(why string) *healthState {
	return &healthState{h: directory.Health{LastError: why}}
}

func (s *healthState) get() directory.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// live records an answer on the watch: the cache is current as of now.
// It reports whether the state changed from not connected.
func (s *healthState) live(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.h.Connected
	s.h.Connected, s.h.LastError, s.h.LastSync = true, "", now
	return !was
}

// down records why the cache is not live and reports whether that is news
// (worth one log line) rather than the same failure again.
func (s *healthState) down(why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	news := s.h.Connected || s.h.LastError != why
	s.h.Connected, s.h.LastError = false, why
	return news
}

func (s *healthState) setRevision(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Revision = rev
}

func (s *healthState) revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Revision
}
