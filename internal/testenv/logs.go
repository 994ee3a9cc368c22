package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// LogBuffer collects the log lines of a component under test (a
// directory's Logf), for the test to count.
type LogBuffer struct {
	mu    sync.Mutex
	lines []string
}

// Logf appends one line.
func (b *LogBuffer) Logf(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, fmt.Sprintf(format, args...))
}

// Count returns how many lines contain every one of subs.
func (b *LogBuffer) Count(subs ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lines {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			n++
		}
	}
	return n
}

// String returns the lines, one per line.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// AgreeOnKey calls get(0) ... get(n-1) at once, as n agents asking for
// the cluster key together, and fails the test unless every call returns
// the same key of directory.ClusterKeySize bytes, which it returns.
func AgreeOnKey(t *testing.T, n int, get func(i int) ([]byte, error)) []byte {
	t.Helper()
	keys := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := get(i)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i, k := range keys {
		if len(k) != directory.ClusterKeySize || string(k) != string(keys[0]) {
			t.Fatalf("key %d = %x, key 0 = %x: concurrent first users disagree", i, k, keys[0])
		}
	}
	return keys[0]
}
