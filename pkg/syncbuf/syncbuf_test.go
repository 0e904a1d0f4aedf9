package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Writers and a reader together (the race detector checks the locking):
// every write is kept whole.
func TestWritesFromGoroutines(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "w%d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	for _, l := range lines {
		if len(l) != 2 || l[0] != 'w' {
			t.Fatalf("line %q: a write was split", l)
		}
	}
}
