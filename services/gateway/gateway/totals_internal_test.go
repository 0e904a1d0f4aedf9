package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
)

// TestTotalsCache: requests that come while the totals of a filter are
// computed share that computation; its answer is reused while fresh; an
// error is not; another filter is computed on its own; a request whose
// client goes does not stop the computation the others wait for.
func TestTotalsCache(t *testing.T) {
	var c totalsCache
	var calls atomic.Int32
	release := make(chan struct{})
	slow := func(ctx context.Context) (chainstore.ListTotals, error) {
		calls.Add(1)
		<-release
		return chainstore.ListTotals{Executions: 238}, ctx.Err()
	}

	// The first request computes, and goes before it ends; 4 more wait.
	gone, leave := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	got := make(chan int64, 4)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, _, err := c.get(gone, "a", slow); !errors.Is(err, context.Canceled) {
			t.Errorf("the request that went: %v, want it cancelled", err)
		}
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tt, _, err := c.get(t.Context(), "a", slow)
			if err != nil {
				t.Error(err)
			}
			got <- tt.Executions
		}()
	}
	leave()
	close(release)
	wg.Wait()
	close(got)
	for n := range got {
		if n != 238 {
			t.Errorf("a request got %d executions, want 238", n)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("5 requests computed %d times, want once", n)
	}

	// Fresh: reused, with the time it was computed.
	_, at1, _ := c.get(t.Context(), "a", slow)
	_, at2, _ := c.get(t.Context(), "a", slow)
	if calls.Load() != 1 || !at1.Equal(at2) || at1.IsZero() {
		t.Errorf("fresh totals computed again (%d calls) or with other times %v, %v", calls.Load(), at1, at2)
	}

	tests := []struct {
		name  string
		key   string
		err   error
		calls int32
	}{
		{"another filter", "b", nil, 1},
		{"an error", "c", errors.New("store down"), 1},
		{"an error is not kept", "c", errors.New("store down"), 2},
	}
	counts := map[string]*atomic.Int32{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if counts[tt.key] == nil {
				counts[tt.key] = &atomic.Int32{}
			}
			n := counts[tt.key]
			_, _, err := c.get(t.Context(), tt.key, func(context.Context) (chainstore.ListTotals, error) {
				n.Add(1)
				return chainstore.ListTotals{Executions: 1}, tt.err
			})
			if !errors.Is(err, tt.err) || n.Load() != tt.calls {
				t.Errorf("err %v after %d computations; want %v after %d", err, n.Load(), tt.err, tt.calls)
			}
		})
	}
}
