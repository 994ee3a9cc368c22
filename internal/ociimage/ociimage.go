// Package ociimage writes container images without a registry or a
// container engine: an OCI image layout (image-spec v1.1) as one tar
// stream, holding a single uncompressed layer made from a directory.
// `ctr -n k8s.io images import FILE` loads it into containerd under
// Config.Name, where the kubelet finds it (imagePullPolicy Never or
// IfNotPresent), and `docker load` / `podman load` read it too.
//
// The output depends only on the directory's content and the config: file
// times, owners and the order of entries are fixed, so the same input gives
// the same image digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Media types and annotations of the OCI image spec and containerd.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	// annotationImageName is the name containerd's importer gives the image.
	annotationImageName = "io.containerd.image.name"
	// annotationRefName is the OCI layout's name of the manifest (the tag).
	annotationRefName = "org.opencontainers.image.ref.name"
)

// Config describes the image.
type Config struct {
	// Name is the image's full reference, domain included, such as
	// "localhost/freeflow/pause:1" (a name without a domain would be read as
	// docker.io/library/..., which the kubelet would try to pull).
	Name       string
	Entrypoint []string
	Cmd        []string
	Env        []string // K=V
	WorkingDir string
	// Architecture defaults to the one this program was built for.
	Architecture string
}

// Descriptor names a blob by digest and size.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is a descriptor's operating system and architecture.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// WriteFile writes the image of rootfs to the file path (see Write).
func WriteFile(path, rootfs string, cfg Config) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create image file: %w", err)
	}
	if err := Write(f, rootfs, cfg); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("write image file %s: %w", path, err)
	}
	return nil
}

// Write writes the OCI image layout of an image whose root file system is
// the content of directory rootfs (regular files, directories and symbolic
// links, owned by root in the image) as a tar stream to w.
func Write(w io.Writer, rootfs string, cfg Config) error {
	if err := checkName(cfg.Name); err != nil {
		return err
	}
	layer, err := Layer(rootfs)
	if err != nil {
		return err
	}
	arch := cfg.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	var ic imageConfig
	ic.Architecture, ic.OS = arch, "linux"
	ic.Config.Entrypoint, ic.Config.Cmd, ic.Config.Env, ic.Config.WorkingDir = cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.WorkingDir
	ic.RootFS.Type = "layers"
	ic.RootFS.DiffIDs = []string{digest(layer)}
	configJSON, err := json.Marshal(ic)
	if err != nil {
		return err
	}
	m := manifest{
		SchemaVersion: 2, MediaType: mediaManifest,
		Config: describe(mediaConfig, configJSON),
		Layers: []Descriptor{describe(mediaLayer, layer)},
	}
	manifestJSON, err := json.Marshal(m)
	if err != nil {
		return err
	}
	md := describe(mediaManifest, manifestJSON)
	md.Annotations = map[string]string{annotationImageName: cfg.Name, annotationRefName: tagOf(cfg.Name)}
	md.Platform = &Platform{Architecture: arch, OS: "linux"}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []Descriptor{md}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{"blobs/", nil},
		{"blobs/sha256/", nil},
		{blobPath(layer), layer},
		{blobPath(configJSON), configJSON},
		{blobPath(manifestJSON), manifestJSON},
	}
	for _, f := range files {
		if err := writeEntry(tw, f.name, f.data); err != nil {
			return fmt.Errorf("write image %s: %w", cfg.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write image %s: %w", cfg.Name, err)
	}
	return nil
}

// checkName rejects a name containerd would not import as given: empty, or
// without a domain (a first path element with a '.' or ':', or localhost).
func checkName(name string) error {
	first, _, ok := strings.Cut(name, "/")
	if name == "" || !ok || (first != "localhost" && !strings.ContainsAny(first, ".:")) {
		return fmt.Errorf("image name %q: need a full reference with a domain, such as localhost/freeflow/app:1", name)
	}
	return nil
}

// tagOf returns the tag of a reference ("latest" when it has none).
func tagOf(name string) string {
	if i := strings.LastIndexAny(name, ":/"); i >= 0 && name[i] == ':' {
		return name[i+1:]
	}
	return "latest"
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func describe(mediaType string, b []byte) Descriptor {
	return Descriptor{MediaType: mediaType, Digest: digest(b), Size: int64(len(b))}
}

func blobPath(b []byte) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:")
}

// writeEntry writes a file (or, for a name ending in '/', a directory).
func writeEntry(tw *tar.Writer, name string, data []byte) error {
	h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if strings.HasSuffix(name, "/") {
		h.Mode, h.Size, h.Typeflag = 0o755, 0, tar.TypeDir
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// Layer returns an uncompressed layer tar of the content of dir: entries in
// lexical order, owned by root, with time zero; regular files, directories
// and symbolic links only.
func Layer(dir string) ([]byte, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read image root %s: %w", dir, err)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := addPath(tw, dir, p); err != nil {
			return nil, fmt.Errorf("image root %s: %w", dir, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addPath(tw *tar.Writer, dir, p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(st.Mode().Perm()), Format: tar.FormatPAX}
	switch {
	case st.Mode().IsRegular():
		h.Typeflag, h.Size = tar.TypeReg, st.Size()
	case st.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
	case st.Mode()&fs.ModeSymlink != 0:
		if h.Linkname, err = os.Readlink(p); err != nil {
			return err
		}
		h.Typeflag = tar.TypeSymlink
	default:
		return fmt.Errorf("%s: only regular files, directories and symbolic links go into an image (mode %v)", rel, st.Mode())
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if h.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
