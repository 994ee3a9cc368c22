package kubelab

import (
	"encoding/json"
	"fmt"

	"github.com/freeflow-net/freeflow/internal/ociimage"
)

// RedisImage holds this machine's redis programs, a shell and the few
// tools a check script needs, with their glibc (HostProgramsRootfs): an
// image of ordinary dynamically linked programs, which FreeFlow's runtime
// wrapper preloads the library into. Its entrypoint is `sh -c`.
const RedisImage = "localhost/freeflow/redis:1"

// BuildRedisImage writes RedisImage's root into dir and imports the image
// on every node.
func (c *Cluster) BuildRedisImage(dir string) error {
	if err := HostProgramsRootfs(dir, "sh", "redis-server", "redis-cli", "redis-benchmark", "head", "base64", "cat", "cmp", "sleep"); err != nil {
		return err
	}
	return c.BuildImage(dir, ociimage.Config{Name: RedisImage, Entrypoint: []string{"/bin/sh", "-c"}})
}

// optOut is the annotation of a pod that opts out of FreeFlow, or none.
func optOut(off bool) string {
	if off {
		return `{freeflow.io/fast-path: "off"}`
	}
	return "{}"
}

// RedisServer is a Deployment of one redis server, labelled app: name, on
// node, opted out of FreeFlow if off; its spec says nothing else of
// FreeFlow.
func RedisServer(ns, name, node string, off bool) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}, annotations: %[3]s}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[4]s}
      terminationGracePeriodSeconds: 1
      containers:
      - name: redis
        image: %[5]s
        imagePullPolicy: Never
        args: ["exec redis-server --port 6379 --protected-mode no --save '' --appendonly no"]
`, name, ns, optOut(off), node, RedisImage)
}

// ShellJob is a Job of one pod on node that runs script (sh -c; args are
// its $0, $1, ...) in RedisImage once, opted out of FreeFlow if off.
func ShellJob(ns, name, node string, off bool, script string, args ...string) string {
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %s, namespace: %s}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: %s}
    spec:
      nodeSelector: {kubernetes.io/hostname: %s}
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: job
        image: %s
        imagePullPolicy: Never
        args: %s
`, name, ns, optOut(off), node, RedisImage, jsonList(append([]string{script}, args...)))
}

// ShellPod is a pod on node that runs script (sh -c) in RedisImage, opted
// out of FreeFlow if off.
func ShellPod(ns, name, node string, off bool, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, annotations: %s}
spec:
  nodeSelector: {kubernetes.io/hostname: %s}
  terminationGracePeriodSeconds: 1
  containers:
  - name: sh
    image: %s
    imagePullPolicy: Never
    args: %s
`, name, ns, optOut(off), node, RedisImage, jsonList([]string{script}))
}

// jsonList writes strs as a JSON (and so YAML) list of strings.
func jsonList(strs []string) string {
	b, _ := json.Marshal(strs)
	return string(b)
}
