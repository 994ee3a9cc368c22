// Package mountinfo reads /proc/PID/mountinfo (proc(5)).
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Entry is one mount.
type Entry struct {
	Dev     string   // major:minor of its file system
	Root    string   // the file system's directory it shows
	Point   string   // where it is mounted
	Options []string // per-mount options (ro, nosuid, nodev, noexec, relatime, ...)
}

// ReadOnly reports whether the mount is read-only.
func (e Entry) ReadOnly() bool { return e.Has("ro") }

// Has reports whether option o is among the mount's options.
func (e Entry) Has(o string) bool {
	for _, x := range e.Options {
		if x == o {
			return true
		}
	}
	return false
}

// Read parses a mountinfo file.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 {
			continue
		}
		out = append(out, Entry{Dev: fs[2], Root: Unescape(fs[3]), Point: Unescape(fs[4]), Options: strings.Split(fs[5], ",")})
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space, ...).
func Unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
