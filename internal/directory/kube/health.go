package kube

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// health tracks the watches of the informers. The directory is connected
// while every watch is established: each informer's last list or watch
// call succeeded and its stream has not failed since. A stream the API
// server closes normally (its watch timeout, an expired resourceVersion)
// is re-opened by the informer without counting as an outage; an API
// server that goes away ends the stream and fails the next call at once,
// and a silent network loss is found by client-go's HTTP/2 health check
// (a ping after 30 s idle, 15 s to answer).
type health struct {
	mu   sync.Mutex
	live map[string]bool // per watched resource
	h    directory.Health
	logf func(format string, args ...any)
}

func newHealth(logf func(string, ...any)) *health {
	return &health{live: map[string]bool{}, logf: logf,
		h: directory.Health{LastError: "not yet connected to the Kubernetes API server"}}
}

// expect adds a watch that must be live for the directory to be.
func (s *health) expect(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[what] = false
}

func (s *health) get() directory.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

// watching records that what's watch is established.
func (s *health) watching(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[what] = true
	for _, up := range s.live {
		if !up {
			return
		}
	}
	if !s.h.Connected {
		s.logf("directory: watching the Kubernetes API server (resourceVersion %d)", s.h.Revision)
	}
	s.h.Connected, s.h.LastError, s.h.LastSync = true, "", time.Now()
}

// failed records that what's list or watch failed; logged when it is news.
func (s *health) failed(what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[what] = false
	why := fmt.Sprintf("Kubernetes API server: %s: %v; serving the cached view (waiting: %s)", what, err, s.down())
	news := s.h.Connected || s.h.LastError != why
	s.h.Connected, s.h.LastError = false, why
	if news {
		s.logf("directory: %s", why)
	}
}

// down lists the watches that are not live.
func (s *health) down() string {
	var out []string
	for what, up := range s.live {
		if !up {
			out = append(out, what)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// saw records an object delivered by a watch: while connected, the cache
// is current as of now. Revision is the object's resourceVersion, which
// the API server takes from etcd's revision (opaque to clients; kept when
// it is a number).
func (s *health) saw(resourceVersion string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv, err := strconv.ParseInt(resourceVersion, 10, 64); err == nil && rv > s.h.Revision {
		s.h.Revision = rv
	}
	if s.h.Connected {
		s.h.LastSync = time.Now()
	}
}
