package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readTar returns the regular files of a tar by name, and the header of
// every entry.
func readTar(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		headers[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("read %s: %v", h.Name, err)
			}
			files[h.Name] = data
		}
	}
}

// blob returns the blob d names, checking its size and digest.
func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("no blob %s in the layout", d.Digest)
	}
	if int64(len(b)) != d.Size || digest(b) != d.Digest {
		t.Fatalf("blob %s: size %d digest %s, descriptor says %d", d.Digest, len(b), digest(b), d.Size)
	}
	return b
}

func testRoot(t *testing.T) string {
	dir := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "bin", "app"), []byte("#!program"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc-hosts"), []byte("127.0.0.1 localhost\n"), 0o644))
	must(os.Symlink("bin/app", filepath.Join(dir, "app")))
	return dir
}

// TestWriteLayout checks the layout containerd imports: the index names the
// image and points at a manifest whose config and layer are blobs with the
// right digests, the config carries the entrypoint, and the layer holds the
// directory's files.
func TestWriteLayout(t *testing.T) {
	root := testRoot(t)
	cfg := Config{Name: "localhost/freeflow/app:7", Entrypoint: []string{"/bin/app"}, Cmd: []string{"serve"}, Env: []string{"A=b"}}
	var out bytes.Buffer
	if err := Write(&out, root, cfg); err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, out.Bytes())
	if got := string(files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", got)
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(idx.Manifests))
	}
	md := idx.Manifests[0]
	if md.Annotations[annotationImageName] != cfg.Name || md.Annotations[annotationRefName] != "7" {
		t.Fatalf("manifest annotations %v, want name %s and tag 7", md.Annotations, cfg.Name)
	}
	if md.Platform == nil || md.Platform.OS != "linux" || md.Platform.Architecture == "" {
		t.Fatalf("manifest platform %+v", md.Platform)
	}
	var m manifest
	if err := json.Unmarshal(blob(t, files, md), &m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	var ic imageConfig
	if err := json.Unmarshal(blob(t, files, m.Config), &ic); err != nil {
		t.Fatalf("config: %v", err)
	}
	if strings.Join(ic.Config.Entrypoint, " ") != "/bin/app" || strings.Join(ic.Config.Cmd, " ") != "serve" || ic.Config.Env[0] != "A=b" {
		t.Fatalf("config %+v", ic.Config)
	}
	if len(m.Layers) != 1 || len(ic.RootFS.DiffIDs) != 1 || ic.RootFS.DiffIDs[0] != m.Layers[0].Digest {
		t.Fatalf("layers %v, diff ids %v: want one uncompressed layer, its digest the diff id", m.Layers, ic.RootFS.DiffIDs)
	}
	layerFiles, headers := readTar(t, blob(t, files, m.Layers[0]))
	if string(layerFiles["bin/app"]) != "#!program" || headers["bin/app"].Mode != 0o755 || headers["bin/app"].Uid != 0 {
		t.Fatalf("bin/app in the layer: %q, header %+v", layerFiles["bin/app"], headers["bin/app"])
	}
	if h := headers["app"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "bin/app" {
		t.Fatalf("symlink app in the layer: %+v", h)
	}
	if h := headers["bin/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Fatalf("directory bin/ in the layer: %+v", h)
	}
}

// TestWriteReproducible: the same directory and config give the same bytes
// (so the same image digest), whatever the files' times.
func TestWriteReproducible(t *testing.T) {
	root := testRoot(t)
	cfg := Config{Name: "localhost/x:1", Entrypoint: []string{"/bin/app"}}
	var a, b bytes.Buffer
	if err := Write(&a, root, cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(root, "bin", "app"), time0, time0); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, root, cfg); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two writes of the same image differ")
	}
}

// TestWriteRejects: a name without a domain and a file of another kind
// (a FIFO) are refused with what is wrong, and WriteFile leaves no file.
func TestWriteRejects(t *testing.T) {
	root := testRoot(t)
	out := filepath.Join(t.TempDir(), "img.tar")
	if err := WriteFile(out, root, Config{Name: "pause:1"}); err == nil || !strings.Contains(err.Error(), "domain") {
		t.Fatalf("name without a domain: err = %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(out, root, Config{Name: "localhost/x:1"})
	if err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Fatalf("FIFO in the root: err = %v", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Fatalf("a failed WriteFile left %s (%v)", out, serr)
	}
}

var time0 = time.Unix(1e9, 0)
