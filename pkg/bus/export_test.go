package bus

import "time"

// SetPullWait shortens how long one pull request waits, so that a test sees
// idle workers renew theirs; it returns what restores it.
func SetPullWait(d time.Duration) (restore func()) {
	old := pullWait
	pullWait = d
	return func() { pullWait = old }
}
