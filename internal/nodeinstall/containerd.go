package nodeinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

// The runtime handler "freeflow" lives in containerd's own config.toml,
// between marker lines the installer owns. It cannot be a drop-in that
// config.toml imports: containerd 1.6 and 1.7 replace a plugin's whole
// section with an imported file's (services/server/config, mergeConfig),
// so a drop-in holding only the handler would take the node's sandbox
// image, CNI directories and runc handler away with it.
const (
	blockBegin = "# BEGIN freeflow: the runtime handler \"freeflow\", kept by freeflowd install (what is written between these lines is replaced)"
	blockEnd   = "# END freeflow"
	// handlerTable is the handler's table in configuration version 2.
	handlerTable = `plugins."io.containerd.grpc.v1.cri".containerd.runtimes.freeflow`
)

var (
	version2 = regexp.MustCompile(`(?m)^[ \t]*version[ \t]*=[ \t]*2[ \t]*(#.*)?$`)
	// errNotVersion2: the configuration is of another version, whose
	// plugin names differ.
	errNotVersion2 = errors.New("not containerd configuration version 2")
)

// withHandler returns containerd's configuration config with FreeFlow's
// block (handlerBlock) in place of the one it has, or at its end: the
// rest of the file is kept byte for byte.
func withHandler(config []byte, wrapper string, systemdCgroup bool) ([]byte, error) {
	rest, err := withoutBlock(config)
	if err != nil {
		return nil, err
	}
	if !version2.Match(rest) {
		return nil, errNotVersion2
	}
	if bytes.Contains(rest, []byte(handlerTable+"]")) || bytes.Contains(rest, []byte(handlerTable+".")) {
		return nil, fmt.Errorf("it defines the runtime handler \"freeflow\" itself, outside FreeFlow's block: remove that handler and run the installer again")
	}
	if len(rest) > 0 && rest[len(rest)-1] != '\n' {
		rest = append(rest, '\n')
	}
	return append(rest, handlerBlock(wrapper, systemdCgroup)...), nil
}

// withoutBlock returns config without FreeFlow's block.
func withoutBlock(config []byte) ([]byte, error) {
	begin := bytes.Index(config, []byte(blockBegin+"\n"))
	if begin < 0 {
		return config, nil
	}
	end := bytes.Index(config[begin:], []byte("\n"+blockEnd+"\n"))
	if end < 0 {
		return nil, fmt.Errorf("it has FreeFlow's line %q without its end line %q: remove what is left of the block and run the installer again", blockBegin, blockEnd)
	}
	end += begin + len(blockEnd) + 2
	return append(bytes.Clone(config[:begin]), config[end:]...), nil
}

// handlerBlock is the handler: runc's shim, with the wrapper in runc's
// place, and the pod annotation that opts a pod out copied into its
// containers' OCI configuration. Pods choose it with runtimeClassName:
// freeflow, or every pod gets it where default_runtime_name is "freeflow";
// containerd reads it when restarted (docs/KUBERNETES-DEPLOY.md).
func handlerBlock(wrapper string, systemdCgroup bool) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // a TOML basic string
	return fmt.Appendf(nil, `%s
[%s]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = [%s]
[%s.options]
  BinaryName = %s
  SystemdCgroup = %t
%s
`, blockBegin, handlerTable, q(runtimewrap.OptOutAnnotation), handlerTable, q(wrapper), systemdCgroup, blockEnd)
}
