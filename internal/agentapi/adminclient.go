package agentapi

import (
	"context"
	"fmt"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// AdminClient speaks to the admin socket (CNI plugin, CLI).
type AdminClient struct{ c *Client }

// DialAdmin connects to the admin socket at path and starts the session.
func DialAdmin(path string) (*AdminClient, error) {
	c, err := Dial(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultCallTimeout)
	defer cancel()
	if _, err := c.Hello(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("agent admin socket %s: %w", path, err)
	}
	return &AdminClient{c: c}, nil
}

// Close closes the connection.
func (a *AdminClient) Close() error { return a.c.Close() }

// Register registers (or updates) container c on the agent's host.
func (a *AdminClient) Register(ctx context.Context, c directory.Container) error {
	j, err := protocol.JSON(c)
	if err != nil {
		return err
	}
	if _, err := a.c.Call(ctx, protocol.New(protocol.TypeRegister, 0, j), protocol.TypeOK); err != nil {
		return fmt.Errorf("register container %s with the agent: %w", c.ID, err)
	}
	return nil
}

// Unregister removes container id; an unknown id is not an error.
func (a *AdminClient) Unregister(ctx context.Context, id string) error {
	m := protocol.New(protocol.TypeUnregister, 0, protocol.String(protocol.AttrContainerID, id))
	if _, err := a.c.Call(ctx, m, protocol.TypeOK); err != nil {
		return fmt.Errorf("unregister container %s from the agent: %w", id, err)
	}
	return nil
}

// Release closes the sessions of container id, which is being migrated,
// and has the agent refuse new ones until until; a time already past
// (the zero time) lets it open sessions again.
func (a *AdminClient) Release(ctx context.Context, id string, until time.Time) error {
	ms := uint64(0)
	if !until.IsZero() {
		ms = uint64(until.UnixMilli())
	}
	m := protocol.New(protocol.TypeRelease, 0, protocol.String(protocol.AttrContainerID, id), protocol.U64(protocol.AttrTime, ms))
	if _, err := a.c.Call(ctx, m, protocol.TypeOK); err != nil {
		return fmt.Errorf("release container %s's agent sessions: %w", id, err)
	}
	return nil
}

// ParkContainer has the agent park container id's shared-memory
// connections on plain TCP at their overlay tuples, so that CRIU can
// checkpoint them, and returns how many it parked.
func (a *AdminClient) ParkContainer(ctx context.Context, id string) (int, error) {
	m := protocol.New(protocol.TypeParkContainer, 0, protocol.String(protocol.AttrContainerID, id))
	r, err := a.c.Call(ctx, m, protocol.TypeOK)
	if err != nil {
		return 0, fmt.Errorf("park container %s's shm connections: %w", id, err)
	}
	var v struct{ Parked int }
	if err := r.JSON(&v); err != nil {
		return 0, fmt.Errorf("agent PARK_CONTAINER reply: %w", err)
	}
	return v.Parked, nil
}

// List returns every container in the cluster, as the agent's directory
// cache has them.
func (a *AdminClient) List(ctx context.Context) ([]directory.Container, error) {
	var cs []directory.Container
	if err := a.okJSON(ctx, protocol.TypeList, &cs); err != nil {
		return nil, err
	}
	return cs, nil
}

// Status returns the agent's status.
func (a *AdminClient) Status(ctx context.Context) (Status, error) {
	var st Status
	err := a.okJSON(ctx, protocol.TypeStatus, &st)
	return st, err
}

// Conns returns the live connections the agent answered for and those
// the processes' ledgers list, asking for them a page at a time.
func (a *AdminClient) Conns(ctx context.Context) ([]ConnInfo, error) {
	return listPages[ConnInfo](ctx, a, protocol.ListConns)
}

// QPs returns the verbs queue pairs the agent registered.
func (a *AdminClient) QPs(ctx context.Context) ([]QPInfo, error) {
	return listPages[QPInfo](ctx, a, protocol.ListQPs)
}

// VerbsMem returns, per container, what its verbs QPs and regions hold.
func (a *AdminClient) VerbsMem(ctx context.Context) ([]VerbsMemInfo, error) {
	return listPages[VerbsMemInfo](ctx, a, protocol.ListVerbsMem)
}

// listPages asks CONNS for the list listing names, a page at a time.
func listPages[T any](ctx context.Context, a *AdminClient, listing uint8) ([]T, error) {
	list := []T{}
	for {
		m := protocol.New(protocol.TypeConns, 0, protocol.U32(protocol.AttrOffset, uint32(len(list))))
		if listing != protocol.ListConns {
			m.Attrs = append(m.Attrs, protocol.U8(protocol.AttrListing, listing))
		}
		r, err := a.c.Call(ctx, m, protocol.TypeOK)
		if err != nil {
			return nil, fmt.Errorf("agent %v: %w", protocol.TypeConns, err)
		}
		if err := sameListing(r, listing); err != nil {
			return nil, err
		}
		var page []T
		total, err := r.U32(protocol.AttrCount)
		if err == nil {
			err = r.JSON(&page)
		}
		if err != nil {
			return nil, fmt.Errorf("agent %v reply: %w", protocol.TypeConns, err)
		}
		list = append(list, page...)
		if len(page) == 0 || len(list) >= int(total) { // the list may shrink meanwhile
			return list, nil
		}
	}
}

// sameListing checks that reply r lists what was asked: an agent older
// than LISTING ignores it and lists the connections.
func sameListing(r *protocol.Message, listing uint8) error {
	got := uint8(protocol.ListConns)
	if _, ok := r.Get(protocol.AttrListing); ok {
		var err error
		if got, err = r.U8(protocol.AttrListing); err != nil {
			return fmt.Errorf("agent %v reply: %w", protocol.TypeConns, err)
		}
	}
	if got != listing {
		return fmt.Errorf("the agent answered with list %d, not list %d: it predates that list; restart it with this release (freeflow agent restart --host H)", got, listing)
	}
	return nil
}

func (a *AdminClient) okJSON(ctx context.Context, t protocol.Type, v any) error {
	r, err := a.c.Call(ctx, protocol.New(t, 0), protocol.TypeOK)
	if err != nil {
		return fmt.Errorf("agent %v: %w", t, err)
	}
	if err := r.JSON(v); err != nil {
		return fmt.Errorf("agent %v reply: %w", t, err)
	}
	return nil
}
