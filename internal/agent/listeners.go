package agent

import "sync"

// listenerKey is a library-enabled listening port of a local container.
// A container has one overlay address, so a listener bound to it and one
// bound to the unspecified address are the same for the broker.
type listenerKey struct {
	id   string
	port uint16
}

// listeners is the table LISTEN and UNLISTEN keep. A registration belongs
// to the session that made it and ends with it: a process that exits
// without UNLISTEN leaves nothing behind that would make connectors wait
// for an ACCEPT that never comes.
type listeners struct {
	mu sync.Mutex
	m  map[listenerKey]map[*session]int // how many sockets each session registered
}

func newListeners() *listeners { return &listeners{m: map[listenerKey]map[*session]int{}} }

func (l *listeners) add(s *session, id string, port uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	if l.m[k] == nil {
		l.m[k] = map[*session]int{}
	}
	l.m[k][s]++
}

// remove withdraws one registration of s; an unknown one is ignored
// (UNLISTEN is best effort on the library's side).
func (l *listeners) remove(s *session, id string, port uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	if l.m[k][s] <= 1 {
		delete(l.m[k], s)
	} else {
		l.m[k][s]--
	}
	if len(l.m[k]) == 0 {
		delete(l.m, k)
	}
}

// dropSession withdraws every registration of s.
func (l *listeners) dropSession(s *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, owners := range l.m {
		delete(owners, s)
		if len(owners) == 0 {
			delete(l.m, k)
		}
	}
}

// has reports whether a library-enabled process of container id listens
// on port.
func (l *listeners) has(id string, port uint16) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m[listenerKey{id, port}]) > 0
}
