package kubelab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// HostProgramsRootfs fills root with this machine's programs (found on
// PATH, or absolute paths) and the shared libraries they load, the glibc
// loader among them, at the paths they have here: the root of an image
// of ordinary dynamically linked Debian programs, which the runtime
// wrapper preloads the library into (no registry is reachable to pull
// one from). /tmp is made too.
func HostProgramsRootfs(root string, programs ...string) error {
	files := map[string]bool{}
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			return fmt.Errorf("image program %s: %w", p, err)
		}
		files[path] = true
		libs, err := sharedLibraries(path)
		if err != nil {
			return err
		}
		for _, l := range libs {
			files[l] = true
		}
	}
	// The machine's top-level links (Debian's merged /usr: /bin -> usr/bin,
	// /lib64 -> usr/lib64, ...), so every path a program or the loader
	// names resolves in the image as it does here.
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		target, err := os.Readlink("/" + top)
		if err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, target), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(target, filepath.Join(root, top)); err != nil {
			return err
		}
	}
	for f := range files {
		if err := copyFile(f, filepath.Join(root, f)); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Join(root, "tmp"), 0o1777)
}

// sharedLibraries returns the files ldd says program loads.
func sharedLibraries(program string) ([]string, error) {
	out, err := exec.Command("ldd", program).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
		f := strings.Fields(line)
		switch {
		case len(f) == 4 && f[1] == "=>":
			libs = append(libs, f[2])
		case len(f) == 2 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}

// copyFile copies what src resolves to into dst, keeping its mode.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm())
}
