package validator

import (
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"sync"
)

// DefaultMemoEntries is how many checker answers a Validator remembers.
const DefaultMemoEntries = 4096

// Memo remembers the checker's answers. The checker is a pure function of
// its request (the code, the context keys, the prelude, the decision values)
// and of the interpreter, so a program checked again against the same
// input, as a code-cache hit's is on every run, is answered without
// starting python3 (about 20 ms idle, over 100 ms on a busy machine). The
// runtime and the forbidden list are applied after it, so they are not part
// of the key. Least recently used answers go first. Safe for concurrent use.
type Memo struct {
	max int

	mu      sync.Mutex
	order   *list.List // of *memoEntry, most recent first
	entries map[[sha256.Size]byte]*list.Element
}

type memoEntry struct {
	key [sha256.Size]byte
	res *checkResult
}

// NewMemo returns a Memo of at most max answers (DefaultMemoEntries when max <= 0).
func NewMemo(max int) *Memo {
	if max <= 0 {
		max = DefaultMemoEntries
	}
	return &Memo{max: max, order: list.New(), entries: map[[sha256.Size]byte]*list.Element{}}
}

func memoKey(python string, req checkRequest) ([sha256.Size]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(append(append([]byte(python), 0), body...)), nil
}

// get returns the remembered answer, nil when there is none; the caller must
// not change it.
func (m *Memo) get(key [sha256.Size]byte) *checkResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.entries[key]
	if !ok {
		return nil
	}
	m.order.MoveToFront(el)
	return el.Value.(*memoEntry).res
}

func (m *Memo) put(key [sha256.Size]byte, res *checkResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.entries[key]; ok {
		m.order.MoveToFront(el)
		return
	}
	m.entries[key] = m.order.PushFront(&memoEntry{key: key, res: res})
	for m.order.Len() > m.max {
		last := m.order.Back()
		m.order.Remove(last)
		delete(m.entries, last.Value.(*memoEntry).key)
	}
}

// Len is how many answers are remembered.
func (m *Memo) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}
