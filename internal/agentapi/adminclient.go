package agentapi

import (
	"context"
	"fmt"

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
	cs := []ConnInfo{}
	for {
		m := protocol.New(protocol.TypeConns, 0, protocol.U32(protocol.AttrOffset, uint32(len(cs))))
		r, err := a.c.Call(ctx, m, protocol.TypeOK)
		if err != nil {
			return nil, fmt.Errorf("agent %v: %w", protocol.TypeConns, err)
		}
		var page []ConnInfo
		total, err := r.U32(protocol.AttrCount)
		if err == nil {
			err = r.JSON(&page)
		}
		if err != nil {
			return nil, fmt.Errorf("agent %v reply: %w", protocol.TypeConns, err)
		}
		cs = append(cs, page...)
		if len(page) == 0 || len(cs) >= int(total) { // the list may shrink meanwhile
			return cs, nil
		}
	}
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
