package etcd

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// view is one consistent picture of the directory with its lookup indexes.
type view struct {
	containers map[string]directory.Container // by id
	hosts      map[string]directory.Host      // by name
	byIP       map[string]string              // container IP -> id
	byName     map[string]string              // container name -> id
}

func newView() view {
	return view{
		containers: map[string]directory.Container{},
		hosts:      map[string]directory.Host{},
		byIP:       map[string]string{},
		byName:     map[string]string{},
	}
}

func (v view) put(r record) {
	if r.host != nil {
		v.hosts[r.host.Name] = *r.host
		return
	}
	c := *r.container
	v.remove(containersDir, c.ID)
	v.containers[c.ID] = c
	if c.IP != "" {
		v.byIP[c.IP] = c.ID
	}
	if c.Name != "" {
		v.byName[c.Name] = c.ID
	}
}

// remove drops a record and reports the container it was, if it was one.
// Indexes are cleared only where they still point at this id, so a name or
// IP already taken over by a newer record keeps pointing there.
func (v view) remove(dir, name string) (directory.Container, bool) {
	if dir == hostsDir {
		delete(v.hosts, name)
		return directory.Container{}, false
	}
	c, ok := v.containers[name]
	if !ok {
		return directory.Container{}, false
	}
	delete(v.containers, name)
	if v.byIP[c.IP] == name {
		delete(v.byIP, c.IP)
	}
	if v.byName[c.Name] == name {
		delete(v.byName, c.Name)
	}
	return c, true
}

// cache is the view readers see, plus the undecodable keys already logged
// so that garbage in etcd is reported once, not on every re-list.
type cache struct {
	mu  sync.RWMutex
	v   view
	bad map[string]int64 // key -> mod revision of a value that failed to decode
}

func newCache() *cache { return &cache{v: newView(), bad: map[string]int64{}} }

// replace installs the complete listing kvs and returns the container
// changes against the previous view, plus any new decode problems to log.
func (c *cache) replace(prefix string, kvs []*mvccpb.KeyValue) ([]Event, []string) {
	next := newView()
	bad := map[string]int64{}
	var problems []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kv := range kvs {
		dir, name, ok := recordKey(prefix, string(kv.Key))
		if !ok {
			continue
		}
		rec, err := decode(dir, name, kv.Value)
		if err != nil {
			if p := c.noteBad(kv, err); p != "" {
				problems = append(problems, p)
			}
			bad[string(kv.Key)] = kv.ModRevision
			continue
		}
		next.put(rec)
	}
	events := diff(c.v, next)
	c.v, c.bad = next, bad
	return events, problems
}

// apply applies watch events in order and returns the container changes,
// plus any new decode problems to log.
func (c *cache) apply(prefix string, evs []*clientv3.Event) ([]Event, []string) {
	var events []Event
	var problems []string
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		e, problem := c.applyOne(prefix, ev)
		if e != nil {
			events = append(events, *e)
		}
		if problem != "" {
			problems = append(problems, problem)
		}
	}
	return events, problems
}

func (c *cache) applyOne(prefix string, ev *clientv3.Event) (*Event, string) {
	key := string(ev.Kv.Key)
	dir, name, ok := recordKey(prefix, key)
	if !ok {
		return nil, ""
	}
	var problem string
	if ev.Type == clientv3.EventTypePut {
		rec, err := decode(dir, name, ev.Kv.Value)
		if err == nil {
			delete(c.bad, key)
			c.v.put(rec)
			if rec.container == nil {
				return nil, ""
			}
			return &Event{Kind: EventPut, Container: *rec.container}, ""
		}
		// Garbage over a record removes it, exactly as a re-list would see it.
		problem = c.noteBad(ev.Kv, err)
	} else {
		delete(c.bad, key)
	}
	if old, ok := c.v.remove(dir, name); ok {
		return &Event{Kind: EventDelete, Container: old}, problem
	}
	return nil, problem
}

// noteBad remembers an undecodable key and returns a message for it unless
// this very value was reported already.
func (c *cache) noteBad(kv *mvccpb.KeyValue, err error) string {
	key := string(kv.Key)
	if rev, seen := c.bad[key]; seen && rev == kv.ModRevision {
		return ""
	}
	c.bad[key] = kv.ModRevision
	return fmt.Sprintf("directory: skipping etcd key %s (revision %d): not a valid record: %v; fix or delete the key", key, kv.ModRevision, err)
}

// diff lists the container changes from old to next, sorted by name.
func diff(old, next view) []Event {
	var events []Event
	for id, c := range next.containers {
		if o, ok := old.containers[id]; !ok || !sameContainer(o, c) {
			events = append(events, Event{Kind: EventPut, Container: c})
		}
	}
	for id, o := range old.containers {
		if _, ok := next.containers[id]; !ok {
			events = append(events, Event{Kind: EventDelete, Container: o})
		}
	}
	slices.SortFunc(events, func(a, b Event) int { return cmp.Compare(a.Container.Name, b.Container.Name) })
	return events
}

// sameContainer compares records; Created goes through Equal because two
// decodes of one timestamp carry different *time.Location pointers.
func sameContainer(a, b directory.Container) bool {
	ta, tb := a.Created, b.Created
	a.Created, b.Created = time.Time{}, time.Time{}
	return a == b && ta.Equal(tb)
}
