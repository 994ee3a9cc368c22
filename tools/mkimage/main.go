// Command mkimage writes the FreeFlow image (`make image`): an OCI image
// layout tar of a directory, for `ctr -n k8s.io images import`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/freeflow-net/freeflow/internal/ociimage"
)

func main() {
	var cfg ociimage.Config
	var rootfs, out, entry string
	flag.StringVar(&cfg.Name, "name", "", "the image's `reference`, e.g. freeflow.io/freeflow:0.1.0")
	flag.StringVar(&rootfs, "rootfs", "", "the `dir`ectory that becomes the image's file system")
	flag.StringVar(&out, "o", "", "the image `file` to write")
	flag.StringVar(&entry, "entrypoint", "", "the image's entrypoint, comma-separated `argv`")
	flag.Parse()
	if cfg.Name == "" || rootfs == "" || out == "" {
		fmt.Fprintln(os.Stderr, "mkimage: -name, -rootfs and -o are required")
		os.Exit(2)
	}
	if entry != "" {
		cfg.Entrypoint = strings.Split(entry, ",")
	}
	if err := ociimage.WriteFile(out, rootfs, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}
