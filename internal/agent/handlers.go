package agent

import (
	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"net/netip"
)

// handleHello starts the session. On the library socket the reply names
// the caller's container as the kernel identifies it; on the admin socket
// the caller must be root and outside every registered container.
func (s *session) handleHello(m *protocol.Message) (*protocol.Message, error) {
	if s.hello {
		return nil, protocol.Errorf(protocol.CodeSequence, "second HELLO on one connection; open a new connection instead")
	}
	reply := protocol.New(protocol.TypeHelloReply, m.Seq, protocol.String(protocol.AttrAgentVersion, agentapi.Version))
	if s.admin { // admit checked the caller (checkAdmin)
		s.hello = true
		return reply, nil
	}
	c := s.self // admit identified the caller (caller)
	if caps, err := m.U32(protocol.AttrCaps); err == nil {
		s.caps = caps // optional; bits the agent does not know are ignored
	}
	s.hello = true
	ip, _ := netip.ParseAddr(c.IP)
	reply.Attrs = append(reply.Attrs,
		protocol.String(protocol.AttrContainerID, c.ID),
		protocol.String(protocol.AttrName, c.Name),
		protocol.IP(ip),
		protocol.String(protocol.AttrTenant, c.Tenant),
		protocol.String(protocol.AttrHost, c.Host))
	return reply, nil
}

// caller returns the registered container the library-socket caller runs in.
func (s *session) caller() (directory.Container, error) {
	if s.peerErr == nil {
		if c, ok := s.a.identify(s.ns); ok {
			return c, nil
		}
	}
	return directory.Container{}, protocol.Errorf(protocol.CodeDenied,
		"caller (pid %d) is not in a registered container of host %s; start it with `freeflow run` or register it through the CNI plugin",
		s.pid, s.a.cfg.Host)
}

func (s *session) checkAdmin() error {
	if s.peerErr != nil {
		return protocol.Errorf(protocol.CodeDenied, "cannot identify the admin caller: %v", s.peerErr)
	}
	if s.uid != 0 {
		return protocol.Errorf(protocol.CodeDenied, "the admin socket is for root; caller (pid %d) runs as uid %d", s.pid, s.uid)
	}
	if c, ok := s.a.identify(s.ns); ok {
		return protocol.Errorf(protocol.CodeDenied, "caller (pid %d) runs inside container %s; admin requests come from the host", s.pid, c.ID)
	}
	return nil
}

// handleLookup answers from the directory cache.
func (s *session) handleLookup(m *protocol.Message) (*protocol.Message, error) {
	if !s.admin {
		if err := s.registered(); err != nil {
			return nil, err
		}
	}
	ip, err := m.IP()
	if err != nil {
		return nil, err
	}
	c, found := s.a.dir.LookupIP(ip.Unmap().String())
	reply := protocol.New(protocol.TypeLookupReply, m.Seq, protocol.Bool(protocol.AttrFound, found))
	if !found {
		return reply, nil
	}
	reply.Attrs = append(reply.Attrs,
		protocol.String(protocol.AttrName, c.Name),
		protocol.String(protocol.AttrHost, c.Host),
		protocol.String(protocol.AttrTenant, c.Tenant),
		protocol.IP(ip),
		protocol.Bool(protocol.AttrLocal, c.Host == s.a.cfg.Host),
		protocol.Bool(protocol.AttrFreeFlow, c.FreeFlow))
	return reply, nil
}
