// Package ociimage writes a container image without a registry or a
// container engine: an OCI image layout (image-spec v1.1) as one tar,
// holding one uncompressed layer made from a directory, which `ctr -n
// k8s.io images import FILE` loads into containerd under Config.Name.
// File times and owners are fixed, so the same input gives the same digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/atomicfile"
)

// Config describes the image.
type Config struct {
	// Name is the image's full reference, domain included, such as
	// "freeflow.io/freeflow:0.1.0" (without a domain it would be read as
	// docker.io/library/..., which the kubelet would try to pull).
	Name       string
	Entrypoint []string
}

// Descriptor names a blob by digest and size.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// epoch is every file's time in the image, so builds are reproducible.
var epoch = time.Unix(0, 0)

// WriteFile writes the image of the directory rootfs to path (whole: a
// reader sees no partial image).
func WriteFile(path, rootfs string, cfg Config) error {
	if !strings.Contains(strings.SplitN(cfg.Name, "/", 2)[0], ".") || !strings.Contains(cfg.Name, ":") {
		return fmt.Errorf("image name %q: want a full reference with a domain and a tag, such as freeflow.io/freeflow:0.1.0", cfg.Name)
	}
	layer, err := Layer(rootfs)
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	add := func(media string, b []byte) Descriptor {
		sum := sha256.Sum256(b)
		d := Descriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
		blobs[d.Digest] = b
		return d
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer)
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": cfg.Entrypoint},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": add("application/vnd.oci.image.config.v1+json", config), "layers": []Descriptor{layerDesc},
	})
	m := add("application/vnd.oci.image.manifest.v1+json", manifest)
	m.Annotations = map[string]string{"io.containerd.image.name": cfg.Name,
		"org.opencontainers.image.ref.name": cfg.Name[strings.LastIndex(cfg.Name, ":")+1:]}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []Descriptor{m}})

	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	files := []struct {
		name string
		b    []byte
	}{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}, {"index.json", index}}
	for _, digest := range slices.Sorted(maps.Keys(blobs)) {
		files = append(files, struct {
			name string
			b    []byte
		}{"blobs/sha256/" + strings.TrimPrefix(digest, "sha256:"), blobs[digest]})
	}
	for _, f := range files {
		if err := writeEntry(tw, &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.b))}, f.b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return atomicfile.Write(path, out.Bytes(), 0o644)
}

// Layer returns the directory dir as an uncompressed layer tar: its
// files, directories and symbolic links, owned by root, in name order.
func Layer(dir string) ([]byte, error) {
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm())}
		var body []byte
		switch {
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case d.Type()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(path); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if body, err = os.ReadFile(path); err != nil {
				return err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		default:
			return fmt.Errorf("%s: only files, directories and symbolic links go into an image", path)
		}
		return writeEntry(tw, h, body)
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("make the image layer of %s: %w", dir, err)
	}
	return out.Bytes(), nil
}

func writeEntry(tw *tar.Writer, h *tar.Header, body []byte) error {
	h.ModTime, h.Format = epoch, tar.FormatPAX
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}
