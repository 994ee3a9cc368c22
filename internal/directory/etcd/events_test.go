package etcd

import (
	"testing"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// A subscriber that stops reading must never block the watch loop; it gets
// one EventResync in place of what it missed, then events again.
func TestSubscriberOverflowResyncs(t *testing.T) {
	s := newSubscribers()
	d := &Directory{subs: s}
	ch, stop := d.Subscribe()
	var burst []Event
	for range 3 * subscriberBuffer {
		burst = append(burst, Event{Kind: EventPut, Container: directory.Container{Name: "x"}})
	}
	s.publish(burst) // must return although nobody reads
	s.publish([]Event{{Kind: EventDelete, Container: directory.Container{Name: "y"}}})

	if e := <-ch; e.Kind != EventResync {
		t.Fatalf("first event after overflow = %v, want resync", e.Kind)
	}
	if e := <-ch; e.Kind != EventDelete || e.Container.Name != "y" {
		t.Fatalf("event after resync = %v %s, want delete y", e.Kind, e.Container.Name)
	}
	stop()
	if _, open := <-ch; open {
		t.Fatal("channel still open after unsubscribe")
	}
	stop() // twice is harmless
}
