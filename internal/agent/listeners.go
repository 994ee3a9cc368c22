package agent

import "sync"

// listenerKey is a library-enabled listening port of a local container.
// A container has one overlay address, so a listener bound to it and one
// bound to the unspecified address are the same for the broker.
type listenerKey struct {
	id   string
	port uint16
}

// listeners is the table LISTEN and UNLISTEN keep: for each port, the
// processes that registered it. A registration outlives the control
// connection that made it (the library opens one per thread and drops it
// after a timeout, while the listening socket lives on) and ends with
// UNLISTEN or with its process, checked when the table is read: a process
// that exits without UNLISTEN leaves nothing behind that would make
// connectors wait for an ACCEPT that never comes. After an agent restart
// the table is empty until the libraries register their listeners again.
type listeners struct {
	mu sync.Mutex
	m  map[listenerKey]map[int32]nsKey // pid -> its network namespace at LISTEN
}

func newListeners() *listeners { return &listeners{m: map[listenerKey]map[int32]nsKey{}} }

func (l *listeners) add(s *session, id string, port uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	if l.m[k] == nil {
		l.m[k] = map[int32]nsKey{}
	}
	l.m[k][s.pid] = s.ns
}

// remove withdraws the registration of s's process; an unknown one is
// ignored (UNLISTEN is best effort on the library's side).
func (l *listeners) remove(s *session, id string, port uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	delete(l.m[k], s.pid)
	if len(l.m[k]) == 0 {
		delete(l.m, k)
	}
}

// has reports whether a library-enabled process of container id listens
// on port.
func (l *listeners) has(id string, port uint16) bool { return len(l.pids(id, port)) > 0 }

// pids returns the processes that registered container id's port,
// forgetting registrations whose process is gone (or whose pid now names
// a process in another namespace).
func (l *listeners) pids(id string, port uint16) []int32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	var live []int32
	for pid, ns := range l.m[k] {
		if now, err := nsOfPid(pid); err != nil || now != ns {
			delete(l.m[k], pid)
			continue
		}
		live = append(live, pid)
	}
	if len(live) == 0 {
		delete(l.m, k)
	}
	return live
}

// keysOf returns the listeners process pid (in namespace ns) registered.
func (l *listeners) keysOf(pid int32, ns nsKey) map[listenerKey]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := map[listenerKey]bool{}
	for k, pids := range l.m {
		if at, ok := pids[pid]; ok && at == ns {
			mine[k] = true
		}
	}
	return mine
}
