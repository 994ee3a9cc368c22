package kube

import rbacv1 "k8s.io/api/rbac/v1"

// AgentRules are the RBAC rules the agent needs and no more: cluster-wide,
// to watch every pod and node and to annotate pods (a pod's record is
// written by the agent of its node); in FreeFlow's namespace, to read
// and once create the cluster key Secret (create cannot be limited to a
// name), and to watch the one ConfigMap: namespaced goes into a Role
// there. deploy/ grants the same.
func AgentRules() (cluster, namespaced []rbacv1.PolicyRule) {
	cluster = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	}
	namespaced = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{ClusterKeySecret}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{ConfigMapName}, Verbs: []string{"get", "list", "watch"}},
	}
	return cluster, namespaced
}
