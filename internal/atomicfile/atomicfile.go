// Package atomicfile writes files whole: a new file in the same directory,
// renamed over the old one, so a reader (runc reading config.json, a CNI
// runtime reading its configuration directory, a container mapping the
// library) sees the old file or the new one, never a part of either.
package atomicfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes b to path with mode. On error path is unchanged and no
// temporary file is left.
func Write(path string, b []byte, mode os.FileMode) error {
	// The leading dot keeps the temporary file out of what globbing
	// readers take (containerd's *.toml imports, libcni's *.conflist).
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Rewrite replaces path's content with b, keeping its mode (0644 for a
// file that does not exist).
func Rewrite(path string, b []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	return Write(path, b, mode)
}

// Update writes b to path unless path already holds exactly b with mode,
// and reports whether it wrote.
func Update(path string, b []byte, mode os.FileMode) (bool, error) {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode.Perm() {
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, b) {
			return false, nil
		}
	}
	return true, Write(path, b, mode)
}
