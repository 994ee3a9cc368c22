package etcd

import (
	"sync"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// EventKind says what happened to a container.
type EventKind int

const (
	// EventPut: the container was added or changed; Container is its new record.
	EventPut EventKind = iota + 1
	// EventDelete: the container is gone; Container is its last record.
	EventDelete
	// EventResync: events were dropped because the subscriber fell behind;
	// Container is empty. Re-read the whole view with Containers().
	EventResync
)

func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventResync:
		return "resync"
	}
	return "unknown"
}

// Event is one change to the cached view, delivered after the cache has it.
type Event struct {
	Kind      EventKind
	Container directory.Container
}

// subscriberBuffer is how many events a subscriber may fall behind before
// its pending events are replaced by one EventResync.
const subscriberBuffer = 64

// subscribers fans events out without ever blocking the watch loop.
type subscribers struct {
	mu     sync.Mutex
	chans  map[chan Event]struct{}
	closed bool
}

func newSubscribers() *subscribers { return &subscribers{chans: map[chan Event]struct{}{}} }

// Subscribe returns a channel of container changes and a function that ends
// the subscription. Events arrive in etcd revision order after the cache
// already reflects them; every (re-)list sends the difference from the
// previous view, so subscribing right after New yields a put for each
// container already registered. A subscriber that falls more than 64 events behind
// loses its pending events and gets a single EventResync instead, after
// which it should re-read Containers(); the watch loop never waits for it.
// The channel is closed by the returned function or by Close.
func (d *Directory) Subscribe() (<-chan Event, func()) {
	s := d.subs
	ch := make(chan Event, subscriberBuffer)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(ch)
		return ch, func() {}
	}
	s.chans[ch] = struct{}{}
	return ch, func() { s.drop(ch) }
}

func (s *subscribers) drop(ch chan Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.chans[ch]; ok {
		delete(s.chans, ch)
		close(ch)
	}
}

func (s *subscribers) publish(events []Event) {
	if len(events) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.chans {
		for _, e := range events {
			if !trySend(ch, e) {
				overflow(ch)
				break // the resync covers the rest of this batch too
			}
		}
	}
}

func trySend(ch chan Event, e Event) bool {
	select {
	case ch <- e:
		return true
	default:
		return false
	}
}

// overflow empties a full channel and leaves one EventResync in it. Only
// publish sends (under s.mu), so after draining there is room for it.
func overflow(ch chan Event) {
	for {
		select {
		case <-ch:
		default:
			ch <- Event{Kind: EventResync}
			return
		}
	}
}

func (s *subscribers) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.chans {
		close(ch)
	}
	s.chans = map[chan Event]struct{}{}
	s.closed = true
}
