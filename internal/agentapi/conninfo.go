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

// QPInfo is one verbs queue pair an agent registered, as `freeflow conns
// --qps -o json` prints it (PROTOCOL.md, "Verbs").
type QPInfo struct {
	Container     string `json:"container"`      // name of the container whose process made it
	QPN           uint32 `json:"qpn"`            // its number, unique on its host
	Type          string `json:"type"`           // RC or UD
	PeerContainer string `json:"peer_container"` // the container of the QP it was last connected to; "" until connected
	PeerQPN       uint32 `json:"peer_qpn"`       // that QP's number; 0 until connected
	Path          string `json:"path"`           // shm: same host, shared memory; host-tcp: a QP on another host
	State         string `json:"state"`          // registered, connected or dead
	// RxBytes is what its ring's header says the peer produced into it
	// (records: a 16-byte header each, payloads, padding), written by the
	// peer, so for display only: a hostile peer writes what it likes. RDMA
	// WRITE and READ move data outside the ring and are not in it.
	RxBytes uint64 `json:"rx_bytes"`
}

// VerbsMemInfo is what one container's verbs QPs and regions hold at an
// agent, as `freeflow conns --regions -o json` prints it.
type VerbsMemInfo struct {
	Container   string `json:"container"`    // its name
	QPs         int    `json:"qps"`          // QPs registered
	Regions     int    `json:"regions"`      // memory regions registered (those that allow remote access)
	RegionBytes uint64 `json:"region_bytes"` // their lengths together, as registered
	Memfds      int    `json:"memfds"`       // distinct memfds the agent holds for them
	MemfdLimit  int    `json:"memfd_limit"`  // the most it may hold now (ARCHITECTURE.md, "Limits")
}
