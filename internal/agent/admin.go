package agent

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// handleAdmin serves the requests accepted only on the admin socket.
func (s *session) handleAdmin(m *protocol.Message) (*protocol.Message, error) {
	switch m.Type {
	case protocol.TypeRegister:
		var c directory.Container
		if err := m.JSON(&c); err != nil {
			return nil, err
		}
		return okReply(m.Seq, nil, s.a.register(s.ctx, c))
	case protocol.TypeUnregister:
		id, err := m.String(protocol.AttrContainerID)
		if err != nil {
			return nil, err
		}
		return okReply(m.Seq, nil, s.a.unregister(s.ctx, id))
	case protocol.TypeRelease:
		id, err := m.String(protocol.AttrContainerID)
		if err != nil {
			return nil, err
		}
		until, err := m.U64(protocol.AttrTime)
		if err != nil {
			return nil, err
		}
		return okReply(m.Seq, nil, s.a.release(id, time.UnixMilli(int64(until))))
	case protocol.TypeParkContainer:
		id, err := m.String(protocol.AttrContainerID)
		if err != nil {
			return nil, err
		}
		n, err := s.a.parkShm(s.ctx, id)
		return okReply(m.Seq, map[string]int{"parked": n}, err)
	case protocol.TypeList:
		return okReply(m.Seq, nonNil(s.a.dir.Containers()), nil)
	case protocol.TypeConns:
		return s.a.connsPage(m, &s.conns)
	default: // STATUS
		return okReply(m.Seq, s.a.status(), nil)
	}
}

func okReply(seq uint32, body any, err error) (*protocol.Message, error) {
	if err != nil {
		return nil, err
	}
	reply := protocol.New(protocol.TypeOK, seq)
	if body != nil {
		j, err := protocol.JSON(body)
		if err != nil {
			return nil, err
		}
		reply.Attrs = append(reply.Attrs, j)
	}
	return reply, nil
}

// nonNil makes an empty list marshal as [] rather than null.
func nonNil(cs []directory.Container) []directory.Container {
	if cs == nil {
		return []directory.Container{}
	}
	return cs
}

// register validates c, writes it to the directory and maps its namespace.
func (a *Agent) register(ctx context.Context, c directory.Container) error {
	k, err := a.validate(&c)
	if err != nil {
		return err
	}
	if c.Created.IsZero() {
		c.Created = time.Now().UTC()
	}
	wctx, cancel := context.WithTimeout(ctx, directoryTimeout)
	defer cancel()
	c, err = a.dir.PutContainer(wctx, c)
	if err != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "write container %s to the directory: %v; try again when the directory is reachable", c.ID, err)
	}
	a.ids.put(c, k)
	a.scanLedgers(map[nsKey]directory.Container{k: c}) // registered again while it runs: its ledgers
	a.log.Info("container registered", "id", c.ID, "name", c.Name, "ip", c.IP, "netns", c.NetNS)
	return nil
}

// unregister removes id; an unknown id is not an error (as CNI DEL).
func (a *Agent) unregister(ctx context.Context, id string) error {
	if err := checkID("container id", id); err != nil {
		return err
	}
	for _, c := range a.dir.Containers() {
		if c.ID == id && c.Host != a.cfg.Host {
			return protocol.Errorf(protocol.CodeInvalid, "container %s belongs to host %s; unregister it through that host's agent", id, c.Host)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, directoryTimeout)
	defer cancel()
	if err := a.dir.DeleteContainer(wctx, id); err != nil {
		return protocol.Errorf(protocol.CodeUnavailable, "remove container %s from the directory: %v; try again when the directory is reachable", id, err)
	}
	a.ids.remove(id)
	a.diag.drop(id)
	a.release(id, time.Time{}) // moved away: no longer held here
	a.log.Info("container unregistered", "id", id)
	return nil
}

// idRE is the CNI rule for container ids (alphanumerics, '-', '_', '.'),
// used for names too: both become etcd key parts and host names.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$`)

func checkID(what, v string) error {
	if !idRE.MatchString(v) {
		return protocol.Errorf(protocol.CodeInvalid, "%s %q must be 1-255 letters, digits, '-', '_' or '.', starting with a letter or digit", what, v)
	}
	return nil
}

// checkName accepts a container name: one name by the CNI rule, or a
// Kubernetes pod's namespace/name (the CNI plugin names pods so).
func checkName(name string) error {
	ns, pod, isPod := strings.Cut(name, "/")
	if !isPod {
		return checkID("container name", name)
	}
	if !idRE.MatchString(ns) || !idRE.MatchString(pod) || len(name) > 255 {
		return protocol.Errorf(protocol.CodeInvalid, "container name %q must be a name or namespace/name, each 1-255 letters, digits, '-', '_' or '.', "+
			"starting with a letter or digit, 255 bytes in all", name)
	}
	return nil
}

// validate checks a REGISTER record against this host and the directory,
// canonicalises its IP, and returns the key of its network namespace.
func (a *Agent) validate(c *directory.Container) (nsKey, error) {
	if err := checkID("container id", c.ID); err != nil {
		return nsKey{}, err
	}
	if err := checkName(c.Name); err != nil {
		return nsKey{}, err
	}
	if c.Tenant != "" {
		if err := checkID("tenant", c.Tenant); err != nil {
			return nsKey{}, err
		}
	}
	if c.Host != a.cfg.Host {
		return nsKey{}, protocol.Errorf(protocol.CodeInvalid, "container %s names host %q, but this agent serves host %s", c.ID, c.Host, a.cfg.Host)
	}
	ip, err := netip.ParseAddr(c.IP)
	if err != nil || !(a.subnet.Contains(ip.Unmap()) || c.Moved && a.otherSubnet(ip.Unmap())) {
		return nsKey{}, protocol.Errorf(protocol.CodeInvalid, "container %s has IP %q, which is not an address in host %s's subnet %s (nor, migrated, in another host's)", c.ID, c.IP, a.cfg.Host, a.subnet)
	}
	c.IP = ip.Unmap().String()
	k, err := a.checkNetNS(c)
	if err != nil {
		return nsKey{}, err
	}
	return k, a.checkUnique(c)
}

// otherSubnet reports whether ip is in the subnet of another host of the
// directory: where a migrated container's address comes from.
func (a *Agent) otherSubnet(ip netip.Addr) bool {
	for _, h := range a.dir.Hosts() {
		p, err := netip.ParsePrefix(h.Subnet)
		if err == nil && h.Name != a.cfg.Host && p.Contains(ip) {
			return true
		}
	}
	return false
}

func (a *Agent) checkNetNS(c *directory.Container) (nsKey, error) {
	k, err := netNSKey(c.NetNS)
	if err != nil {
		return nsKey{}, protocol.Errorf(protocol.CodeInvalid, "container %s: network namespace %q: %v", c.ID, c.NetNS, err)
	}
	if k == a.selfNS {
		return nsKey{}, protocol.Errorf(protocol.CodeInvalid, "container %s: %s is host %s's own network namespace, not a container's", c.ID, c.NetNS, a.cfg.Host)
	}
	if other, ok := a.ids.holder(k); ok && other != c.ID {
		return nsKey{}, protocol.Errorf(protocol.CodeInvalid, "container %s: network namespace %s already belongs to container %s", c.ID, c.NetNS, other)
	}
	return k, nil
}

// checkUnique refuses a name or IP that another container already holds.
func (a *Agent) checkUnique(c *directory.Container) error {
	for _, o := range a.dir.Containers() {
		if o.ID == c.ID {
			continue
		}
		if o.Name == c.Name {
			return protocol.Errorf(protocol.CodeInvalid, "container name %q is already used by container %s on host %s; choose another name or remove that container first", c.Name, o.ID, o.Host)
		}
		if o.IP == c.IP {
			return protocol.Errorf(protocol.CodeInvalid, "IP %s is already used by container %s (%s) on host %s", c.IP, o.Name, o.ID, o.Host)
		}
	}
	return nil
}

// validRecord reports whether a record read from the directory can be
// served (its fields fit the wire limits).
func validRecord(c directory.Container) error {
	if _, err := netip.ParseAddr(c.IP); err != nil {
		return fmt.Errorf("IP %q: %w", c.IP, err)
	}
	for _, v := range []string{c.ID, c.Name, c.Tenant, c.Host} {
		if len(v) > 255 {
			return fmt.Errorf("a field is longer than 255 bytes")
		}
	}
	return nil
}
