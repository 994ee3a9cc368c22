package nodeinstall

import (
	"encoding/json"
	"fmt"

	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

// dropIn is the containerd (1.6, configuration version 2) drop-in that
// makes the wrapper at wrapper the runtime handler "freeflow": runc's shim,
// with the wrapper in runc's place, and the pod annotation that opts a pod
// out copied into its containers' OCI configuration. It takes effect
// where containerd's config.toml imports the drop-in directory and
// containerd is restarted (docs/KUBERNETES-DEPLOY.md); pods then choose it
// with runtimeClassName: freeflow, or every pod gets it where
// default_runtime_name is "freeflow".
func dropIn(confDir, wrapper string, systemdCgroup bool) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // a TOML basic string
	const table = `plugins."io.containerd.grpc.v1.cri".containerd.runtimes.freeflow`
	return fmt.Appendf(nil, `# Written by freeflowd install (FreeFlow): the runtime handler "freeflow".
# containerd reads it where its config.toml has
#   imports = [%s]
# (after a restart of containerd).
version = 2

[%s]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = [%s]

[%s.options]
  BinaryName = %s
  SystemdCgroup = %t
`, q(confDir+"/*.toml"), table, q(runtimewrap.OptOutAnnotation), table, q(wrapper), systemdCgroup)
}

func jsonIndent(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
