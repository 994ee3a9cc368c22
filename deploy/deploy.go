// Package deploy holds FreeFlow's Kubernetes manifests (`kubectl apply -f
// deploy/`), embedded for the code that applies them itself (the bench's
// Kubernetes experiments and their tests, internal/kubelab); its tests
// check them against the Kubernetes API types and, where one is built, a
// real kube-apiserver.
package deploy

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var files embed.FS

// File is one manifest file.
type File struct {
	Name string
	Text []byte
}

// Manifests returns the manifest files in the order `kubectl apply -f
// deploy/` applies them (by name).
func Manifests() ([]File, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]File, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, File{Name: n, Text: b})
	}
	return out, nil
}
