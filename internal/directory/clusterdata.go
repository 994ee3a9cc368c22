package directory

import (
	"context"
	"crypto/rand"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Two cluster-wide documents live next to the records, outside the cache
// (they are read rarely and must not appear in LookupIP or Containers):
//
//	/freeflow/<cluster>/key      the agents' broker key, 32 random bytes
//	/freeflow/<cluster>/policy   the fast-path policy, JSON (internal/policy)
const (
	keyName    = "key"
	policyName = "policy"
	// ClusterKeySize is the length of the broker key.
	ClusterKeySize = 32
)

// ClusterKey returns the key the agents of the cluster authenticate their
// fast-path offers with. The first agent to ask creates it: a transaction
// puts a fresh random key only if none exists, and every caller returns
// whatever the key holds afterwards, so concurrent first users agree.
func (d *Directory) ClusterKey(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, ClusterKeySize)
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
	if len(kvs) != 1 || len(kvs[0].Value) != ClusterKeySize {
		return nil, fmt.Errorf("directory: cluster key %s is not %d bytes; delete it and restart the agents to make a new one", key, ClusterKeySize)
	}
	return kvs[0].Value, nil
}

// Policy returns the cluster's fast-path policy document, or nil when none
// is set (the default policy applies).
func (d *Directory) Policy(ctx context.Context) ([]byte, error) {
	key := d.prefix + policyName
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.client.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("directory: read policy %s from etcd at %v: %w", key, d.cfg.Endpoints, err)
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
