// Package agentapi is the agent's API as its callers see it: the records
// its sockets answer with (Status, ConnInfo) and the clients that speak the
// protocol on them (Dial for the library socket, DialAdmin for the admin
// socket). The agent (internal/agent) answers with the same types. It
// links neither the agent nor etcd, so the CNI plugin and the CLI stay
// small; TestCNIPluginLinksNoEtcd keeps it so.
package agentapi
