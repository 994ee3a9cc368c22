package kubelab

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/cluster"
	"github.com/freeflow-net/freeflow/internal/netns"
)

// Control-plane addresses, inside the first host's network namespace.
const (
	apiPort = 6443
	// ServiceCIDR is the range of Service cluster IPs; it overlaps neither
	// the fabric (10.99.0.0/24) nor the overlay (10.244.0.0/16). No
	// kube-proxy runs, so nothing routes these addresses: pods reach the
	// API server at its endpoint (the first host's fabric address, port
	// 6443), not at the kubernetes Service.
	ServiceCIDR = "10.96.0.0/16"
	// serviceIP is the kubernetes Service's address, named in the API
	// server's certificate.
	serviceIP = "10.96.0.1"
	// etcdPrefix keeps Kubernetes' keys apart from FreeFlow's directory in
	// the cluster's etcd.
	etcdPrefix = "/kubernetes"
)

// controlPlane runs kube-apiserver, kube-controller-manager and
// kube-scheduler in the network namespace of the first host (a control
// plane on node h1, as kubeadm makes one), storing into the FreeFlow
// cluster's etcd on the fabric.
type controlPlane struct {
	ns, dir, advertise string
	pki                *pki
	procs              []*proc
}

// start starts the three programs; the caller waits for the API server.
func (cp *controlPlane) start() error {
	p := cp.pki
	api := cp.command("kube-apiserver",
		"--etcd-servers", cluster.ManagedEtcdURL,
		"--etcd-prefix", etcdPrefix,
		"--bind-address", "0.0.0.0",
		"--secure-port", fmt.Sprint(apiPort),
		"--advertise-address", cp.advertise,
		"--tls-cert-file", p.cert("apiserver"),
		"--tls-private-key-file", p.key("apiserver"),
		"--client-ca-file", p.cert("ca"),
		"--kubelet-client-certificate", p.cert("admin"),
		"--kubelet-client-key", p.key("admin"),
		// Node names (h1, ...) resolve nowhere; their fabric addresses route.
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.path("sa.pub"),
		"--service-account-signing-key-file", p.key("sa"),
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		"--profiling=false",
		"--cert-dir", filepath.Join(cp.dir, "apiserver-certs"))
	cm := cp.command("kube-controller-manager",
		"--kubeconfig", cp.kubeconfig(),
		"--service-account-private-key-file", p.key("sa"),
		"--root-ca-file", p.cert("ca"),
		"--use-service-account-credentials=true",
		"--allocate-node-cidrs=false",
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--cert-dir", filepath.Join(cp.dir, "controller-manager-certs"),
		"--profiling=false")
	sched := cp.command("kube-scheduler",
		"--kubeconfig", cp.kubeconfig(),
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--cert-dir", filepath.Join(cp.dir, "scheduler-certs"),
		"--profiling=false")
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{{"kube-apiserver", api}, {"kube-controller-manager", cm}, {"kube-scheduler", sched}} {
		pr, err := start(c.cmd, filepath.Join(cp.dir, c.name+".log"), c.name)
		if err != nil {
			return err
		}
		cp.procs = append(cp.procs, pr)
	}
	return nil
}

func (cp *controlPlane) command(prog string, args ...string) *exec.Cmd {
	return netns.Command(cp.ns, filepath.Join(BinDir(), prog), args...)
}

// kubeconfig is the controller manager's and scheduler's: the admin
// identity, at the API server on the namespace's loopback.
func (cp *controlPlane) kubeconfig() string { return filepath.Join(cp.dir, "control.kubeconfig") }

// makePKI issues the control plane's certificates and kubeconfigs.
func (cp *controlPlane) makePKI() error {
	p := cp.pki
	if err := p.issue("apiserver", "kube-apiserver", nil,
		"127.0.0.1", "localhost", cp.advertise, serviceIP,
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return err
	}
	if err := p.issue("admin", "admin", []string{"system:masters"}); err != nil {
		return err
	}
	return p.kubeconfig(cp.kubeconfig(), fmt.Sprintf("https://127.0.0.1:%d", apiPort), "admin")
}
