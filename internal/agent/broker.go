package agent

import "github.com/freeflow-net/freeflow/internal/protocol"

// reasonNoFastPath is the PATH reason while the agent brokers no fast
// paths: the overlay answer every library must accept.
const reasonNoFastPath = "agent-no-fastpath"

// handleBrokering answers the connection-brokering requests of the
// library. This version decides overlay for every connection, at once and
// for both ends alike, so a library that asks is never kept waiting and
// never swaps a connection; LISTEN, UNLISTEN and CLOSED are acknowledged.
func (s *session) handleBrokering(m *protocol.Message) (*protocol.Message, error) {
	if s.admin {
		return nil, protocol.Errorf(protocol.CodeDenied, "%v is accepted only on the library socket", m.Type)
	}
	if !s.a.ids.has(s.self.ID) {
		return nil, protocol.Errorf(protocol.CodeDenied, "container %s has been unregistered from host %s", s.self.ID, s.a.cfg.Host)
	}
	if _, err := m.Endpoint(protocol.AttrLocalEndpoint); err != nil {
		return nil, err
	}
	if m.Type != protocol.TypeListen && m.Type != protocol.TypeUnlisten {
		if _, err := m.Endpoint(protocol.AttrRemoteEndpoint); err != nil {
			return nil, err
		}
	}
	if m.Type == protocol.TypeConnect || m.Type == protocol.TypeAccept {
		return protocol.New(protocol.TypePath, m.Seq, protocol.U8(protocol.AttrPathKind, 0),
			protocol.String(protocol.AttrReason, reasonNoFastPath)), nil
	}
	return protocol.New(protocol.TypeOK, m.Seq), nil
}
