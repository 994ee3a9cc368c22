package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
)

const (
	writeAttempt    = time.Second
	writeRetryPause = 100 * time.Millisecond
)

// Writes go straight to etcd and are bounded by Config.RequestTimeout; the
// cache learns of them through the watch like every other agent's does.

// PutContainer registers or replaces c under its ID and returns it as
// stored: unchanged.
func (d *Directory) PutContainer(ctx context.Context, c directory.Container) (directory.Container, error) {
	if err := checkName("container id", c.ID); err != nil {
		return c, err
	}
	return c, d.put(ctx, d.containerKey(c.ID), c)
}

// DeleteContainer removes the container with id; a missing id is not an error.
func (d *Directory) DeleteContainer(ctx context.Context, id string) error {
	if err := checkName("container id", id); err != nil {
		return err
	}
	return d.delete(ctx, d.containerKey(id))
}

// PutHost registers or replaces h under its name.
func (d *Directory) PutHost(ctx context.Context, h directory.Host) error {
	if err := checkName("host name", h.Name); err != nil {
		return err
	}
	return d.put(ctx, d.hostKey(h.Name), h)
}

// DeleteHost removes the host called name; a missing host is not an error.
func (d *Directory) DeleteHost(ctx context.Context, name string) error {
	if err := checkName("host name", name); err != nil {
		return err
	}
	return d.delete(ctx, d.hostKey(name))
}

func (d *Directory) put(ctx context.Context, key string, v any) error {
	value, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("directory: encode %s: %w", key, err)
	}
	return d.retry(ctx, "put", key, func(ctx context.Context) error {
		_, err := d.client.Put(ctx, key, string(value))
		return err
	})
}

func (d *Directory) delete(ctx context.Context, key string) error {
	return d.retry(ctx, "delete", key, func(ctx context.Context) error {
		_, err := d.client.Delete(ctx, key)
		return err
	})
}

// retry runs op until it succeeds or RequestTimeout passes. A put or delete
// of one key is idempotent, so trying again is safe; it carries writes
// across a leader election, which takes one to two election timeouts. Each
// attempt gets at most writeAttempt: a proposal forwarded to a leader that
// just died is lost, and etcd would otherwise hold the request for its own
// 7 s request timeout.
func (d *Directory) retry(ctx context.Context, what, key string, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, writeAttempt)
		err := op(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("directory: %s %s in etcd at %v (gave up after %v; check that etcd is running and reachable): %w",
				what, key, d.cfg.Endpoints, d.cfg.RequestTimeout, err)
		case <-time.After(writeRetryPause):
		}
	}
}
