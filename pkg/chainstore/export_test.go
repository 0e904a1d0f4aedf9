package chainstore

import "go.mongodb.org/mongo-driver/v2/event"

// WithCommandMonitor has the store's client report the commands it sends.
func WithCommandMonitor(m *event.CommandMonitor) Option {
	return func(s *Store) { s.monitor = m }
}

// StampEnded has completions set EndedField, as EnsureRetention does on a
// server with TTL indexes.
func (s *Store) StampEnded(on bool) { s.stampEnded.Store(on) }
