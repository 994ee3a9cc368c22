package etcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// run keeps the cache in sync until ctx ends: list, watch, and on any
// failure start over after a backoff that grows to maxBackoff.
func (d *Directory) run(ctx context.Context) {
	defer close(d.done)
	backoff := minBackoff
	for ctx.Err() == nil {
		rev, err := d.list(ctx)
		if err == nil {
			backoff = minBackoff // etcd answered: the next failure is a new one
			err = d.watch(ctx, rev)
		}
		if ctx.Err() != nil {
			return
		}
		d.markDown(fmt.Sprintf("etcd at %v: %v; serving the cached view", d.cfg.Endpoints, err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// list loads the complete prefix into the cache and returns its revision.
func (d *Directory) list(ctx context.Context) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, d.cfg.RequestTimeout)
	defer cancel()
	resp, err := d.client.Get(lctx, d.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", d.prefix, err)
	}
	events, problems := d.cache.replace(d.prefix, resp.Kvs)
	d.health.setRevision(resp.Header.Revision)
	d.report(events, problems)
	return resp.Header.Revision, nil
}

// watch applies every change after revision rev until the watch fails.
// clientv3 resumes a broken stream by itself, so only failures it cannot
// resume from (compaction, lost leader, revision gone backwards) end up
// here; an unreachable etcd shows as silence, which the probe detects.
func (d *Directory) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := d.client.Watch(wctx, d.prefix, clientv3.WithPrefix(),
		clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
	go d.probe(wctx)
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	lastHeard := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case resp, ok := <-wch:
			if !ok {
				return errors.New("watch closed by the etcd client")
			}
			if err := d.handle(resp); err != nil {
				return err
			}
			lastHeard = time.Now()
			d.markLive(lastHeard)
		case <-tick.C:
			if time.Since(lastHeard) > staleAfter {
				d.markDown(fmt.Sprintf("etcd at %v: no answer on the watch for over %v; serving the cached view",
					d.cfg.Endpoints, staleAfter))
			}
		}
	}
}

// handle applies one watch response.
func (d *Directory) handle(resp clientv3.WatchResponse) error {
	if err := resp.Err(); err != nil {
		return fmt.Errorf("watch %s: %w", d.prefix, err)
	}
	if resp.IsProgressNotify() && resp.Header.Revision < d.health.revision() {
		return fmt.Errorf("etcd revision went back from %d to %d (its data was replaced); re-listing",
			d.health.revision(), resp.Header.Revision)
	}
	if len(resp.Events) == 0 {
		return nil
	}
	events, problems := d.cache.apply(d.prefix, resp.Events)
	d.health.setRevision(resp.Events[len(resp.Events)-1].Kv.ModRevision)
	d.report(events, problems)
	return nil
}

// probe asks for a progress notification on the watch stream every
// probeInterval; the answer arrives on the watch channel and proves the
// stream is live. A failed request needs no handling: it shows as silence.
func (d *Directory) probe(wctx context.Context) {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return
		case <-tick.C:
		}
		// wctx carries the watch's metadata, which selects the same stream.
		pctx, cancel := context.WithTimeout(wctx, probeInterval)
		_ = d.client.RequestProgress(pctx)
		cancel()
	}
}

func (d *Directory) report(events []Event, problems []string) {
	for _, p := range problems {
		d.cfg.Logf("%s", p)
	}
	d.subs.publish(events)
}

func (d *Directory) markLive(now time.Time) {
	if d.health.live(now) {
		d.cfg.Logf("directory: connected to etcd at %v (revision %d)", d.cfg.Endpoints, d.health.revision())
	}
}

func (d *Directory) markDown(why string) {
	if d.health.down(why) {
		d.cfg.Logf("directory: %s", why)
	}
}
