package etcd

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/freeflow-net/freeflow/internal/directory"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Three cluster-wide documents live next to the records, outside the cache
// (they are read rarely and must not appear in LookupIP or Containers):
//
//	/freeflow/<cluster>/key       the agents' broker key, 32 random bytes
//	/freeflow/<cluster>/policy    the fast-path policy, JSON (internal/policy)
//	/freeflow/<cluster>/settings  the cluster's settings, JSON (directory.Settings)
const (
	keyName      = "key"
	policyName   = "policy"
	settingsName = "settings"
)

// ClusterKey returns the key the agents of the cluster authenticate their
// fast-path offers with. The first agent to ask creates it: a transaction
// puts a fresh random key only if none exists, and every caller returns
// whatever the key holds afterwards, so concurrent first users agree.
func (d *Directory) ClusterKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, directory.ClusterKeySize)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("directory: generate cluster key: %w", err)
	}
	key := d.prefix + keyName
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(fresh))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("directory: read or create cluster key %s in etcd at %v: %w", key, d.cfg.Endpoints, err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 || len(kvs[0].Value) != directory.ClusterKeySize {
		return nil, fmt.Errorf("directory: cluster key %s is not %d bytes; delete it and restart the agents to make a new one", key, directory.ClusterKeySize)
	}
	return kvs[0].Value, nil
}

// Policy returns the cluster's fast-path policy document, or nil when none
// is set (the default policy applies).
func (d *Directory) Policy(ctx context.Context) ([]byte, error) {
	return d.document(ctx, policyName)
}

// Settings returns the cluster's settings document, or nil when none is
// set (the default settings apply); ParseSettings reads it.
func (d *Directory) Settings(ctx context.Context) ([]byte, error) {
	return d.document(ctx, settingsName)
}

// document returns the cluster-wide document name, or nil if it is absent.
func (d *Directory) document(ctx context.Context, name string) ([]byte, error) {
	key := d.prefix + name
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("directory: read %s from etcd at %v: %w", key, d.cfg.Endpoints, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// PutPolicy stores the cluster's fast-path policy document (JSON); nil
// removes it.
func (d *Directory) PutPolicy(ctx context.Context, doc []byte) error {
	key := d.prefix + policyName
	if doc == nil {
		return d.delete(ctx, key)
	}
	return d.retry(ctx, "put", key, func(ctx context.Context) error {
		_, err := d.client.Put(ctx, key, string(doc))
		return err
	})
}

// PutSettings stores the cluster's settings.
func (d *Directory) PutSettings(ctx context.Context, s directory.Settings) error {
	return d.put(ctx, d.prefix+settingsName, s)
}
