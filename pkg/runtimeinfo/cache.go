package runtimeinfo

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Cache keeps the published runtime description for a reader (the code
// validator, search_documentation): it loads it on first use, retries soon
// while nothing is published (the sandbox may start later), and picks up a
// republished description (a new sandbox image) by comparing digests now and
// then, which costs one small request.
type Cache struct {
	js jetstream.JetStream
	// RetryMissing is how long to wait before looking again while nothing
	// is published; Refresh how often to check for a new description.
	RetryMissing, Refresh time.Duration

	mu      sync.Mutex
	info    *Info
	checked time.Time
}

// NewCache returns a Cache reading from js.
func NewCache(js jetstream.JetStream) *Cache {
	return &Cache{js: js, RetryMissing: 5 * time.Second, Refresh: time.Minute}
}

// Get returns the current description, or ErrNotPublished when none is
// published yet. A failed refresh keeps the description already held.
func (c *Cache) Get(ctx context.Context) (*Info, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wait := c.Refresh
	if c.info == nil {
		wait = c.RetryMissing
	}
	if !c.checked.IsZero() && time.Since(c.checked) < wait {
		if c.info == nil {
			return nil, ErrNotPublished
		}
		return c.info, nil
	}
	c.checked = time.Now()
	if c.info != nil {
		if digest, err := c.digest(ctx); err != nil || digest == c.info.Digest {
			return c.info, nil
		}
	}
	info, err := Load(ctx, c.js)
	if err != nil {
		if c.info != nil {
			return c.info, nil
		}
		return nil, err
	}
	c.info = info
	return info, nil
}

// Recheck is Get without the wait after a miss: it reads the description
// again now when none is held.
func (c *Cache) Recheck(ctx context.Context) (*Info, error) {
	c.mu.Lock()
	if c.info == nil {
		c.checked = time.Time{}
	}
	c.mu.Unlock()
	return c.Get(ctx)
}

func (c *Cache) digest(ctx context.Context) (string, error) {
	obj, err := c.js.ObjectStore(ctx, Bucket)
	if err != nil {
		return "", err
	}
	meta, err := obj.GetInfo(ctx, Object)
	if err != nil {
		return "", err
	}
	return meta.Digest, nil
}
