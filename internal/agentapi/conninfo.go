package agentapi

// ConnInfo is one live connection an agent answered CONNECT or ACCEPT
// for, or that a process's ledger lists, as `freeflow conns -o json`
// prints it.
type ConnInfo struct {
	Local           string `json:"local"`            // overlay address of this end
	Remote          string `json:"remote"`           // overlay address of the peer
	LocalContainer  string `json:"local_container"`  // name of this end's container
	RemoteContainer string `json:"remote_container"` // the peer's container; "" if it is none
	Path            string `json:"path"`             // overlay, shm, unix or host-tcp
	Reason          string `json:"reason"`           // why overlay, or for unix why not shm; "" otherwise
}
