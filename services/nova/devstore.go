package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/services/nova/stack"
)

// nova dev keeps the address of its embedded audit store in a KV bucket of
// its NATS server, so that the commands that read the chain of work (nova
// rerun, nova chain, nova pin) find it with NATS_URL alone, whatever
// --data-dir nova dev runs on. Only nova dev writes it, only the nova
// command reads it.
const (
	devInfoBucket = "nova_dev"
	devStoreKey   = "audit_store"
)

// devStoreWait bounds how long a command looks for nova dev's store.
const devStoreWait = 3 * time.Second

// publishDevStore writes where s's embedded store is; remove deletes it
// again, when nova dev stops. A store of MONGODB_URI is not written: its
// URI may carry credentials, and whoever set it can set it for the
// commands too.
func publishDevStore(ctx context.Context, s *stack.Stack, opts stack.Options) (remove func(), err error) {
	if opts.MongoURI != "" {
		return func() {}, nil
	}
	b, err := s.Connect(ctx, "nova-dev-store-address")
	if err != nil {
		return nil, err
	}
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: devInfoBucket,
		Description: "where nova dev's embedded audit store is", Replicas: max(1, s.Replicas())})
	if err == nil {
		_, err = kv.PutString(ctx, devStoreKey, s.MongoURI())
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("publish the audit store's address: %w", err)
	}
	return func() {
		_ = kv.Delete(context.WithoutCancel(ctx), devStoreKey)
		b.Close()
	}, nil
}

// devStoreURI is the address of the embedded store of the nova dev at
// NATS_URL (default nova dev's), and that URL; "" when no nova dev is
// reachable there or it has written none.
func devStoreURI(ctx context.Context) (uri, natsURL string, err error) {
	ctx, cancel := context.WithTimeout(ctx, devStoreWait)
	defer cancel()
	b, _, err := connectRemote(ctx, false)
	if err != nil {
		return "", "", err
	}
	defer b.Close()
	natsURL = b.Conn().ConnectedUrl()
	kv, err := b.JetStream().KeyValue(ctx, devInfoBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", natsURL, nil
	}
	if err != nil {
		return "", natsURL, err
	}
	entry, err := kv.Get(ctx, devStoreKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", natsURL, nil
	}
	if err != nil {
		return "", natsURL, err
	}
	return string(entry.Value()), natsURL, nil
}

// redacted is a store's URI with its password, if any, masked.
func redacted(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "(a URI that does not parse)"
	}
	return u.Redacted()
}
