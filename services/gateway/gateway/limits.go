package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// TypeTooManyRequests says a key went over its request rate or its number
// of open streams.
const TypeTooManyRequests = typePrefix + "too-many-requests"

// Default rate and stream limits.
const (
	DefaultRate             = 50
	DefaultBurst            = 100
	DefaultMaxStreams       = 1000
	DefaultMaxStreamsPerKey = 100
	DefaultStreamTimeout    = time.Hour
)

// rateLimits keeps one token bucket per API key.
type rateLimits struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newRateLimits(perSecond float64, burst int) *rateLimits {
	return &rateLimits{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token of key's bucket, or answers 429 with the seconds
// until one is free in Retry-After.
func (l *rateLimits) allow(key string) *Problem {
	l.mu.Lock()
	b := l.buckets[key]
	if b == nil {
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	res := b.Reserve()
	delay := res.Delay()
	if delay == 0 {
		return nil
	}
	res.Cancel()
	retry := max(1, int(math.Ceil(delay.Seconds())))
	return newProblem(http.StatusTooManyRequests, TypeTooManyRequests,
		fmt.Sprintf("API key %q made more than %g requests a second (burst %d); try again in %d s", key, float64(l.limit), l.burst, retry)).
		with("Retry-After", strconv.Itoa(retry))
}

// streamSlots bound the open event streams, in all and per API key.
type streamSlots struct {
	max, perKey int

	mu    sync.Mutex
	total int
	byKey map[string]int
}

func newStreamSlots(max, perKey int) *streamSlots {
	return &streamSlots{max: max, perKey: perKey, byKey: map[string]int{}}
}

// acquire takes a slot for key, or answers 429 when the gateway or the key
// has as many streams open as it may; release gives the slot back.
func (s *streamSlots) acquire(key string) (release func(), p *Problem) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byKey[key] >= s.perKey:
		return nil, newProblem(http.StatusTooManyRequests, TypeTooManyRequests,
			fmt.Sprintf("API key %q has %d event streams open, as many as a key may; close one", key, s.perKey)).
			with("Retry-After", "5")
	case s.total >= s.max:
		return nil, newProblem(http.StatusTooManyRequests, TypeTooManyRequests,
			fmt.Sprintf("the gateway has %d event streams open, as many as it serves; try again later", s.max)).
			with("Retry-After", "5")
	}
	s.total++
	s.byKey[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.total--
			if s.byKey[key]--; s.byKey[key] == 0 {
				delete(s.byKey, key)
			}
		})
	}, nil
}
