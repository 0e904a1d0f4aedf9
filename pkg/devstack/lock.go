package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the file in a data dir that the process serving it holds locked.
const lockFile = "nova.lock"

// ErrDataDirInUse is returned by LockDataDir when another process holds the
// data dir: nats-server and SQLite do not guard against a second server on
// the same files, which would read stale state and corrupt both.
var ErrDataDirInUse = errors.New("data dir is in use")

// DataDirLock is an exclusive lock on a data dir, held until Release or the
// process's end (a crashed process leaves no stale lock: the kernel drops it).
type DataDirLock struct {
	f *os.File
}

// LockDataDir takes the data dir's lock without waiting. When another
// process holds it the error wraps ErrDataDirInUse and names that process.
func LockDataDir(dataDir string) (*DataDirLock, error) {
	if dataDir == "" {
		return nil, ErrNoDataDir
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir %q: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s serves %s (is nova dev running on it?); stop it or choose another --data-dir", ErrDataDirInUse, holder, dataDir)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dataDir, err)
	}
	// The pid is for the message above only; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DataDirLock{f: f}, nil
}

// Release unlocks the data dir; a nil lock or a second call does nothing.
func (l *DataDirLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Close() // closing the descriptor drops the flock
	l.f = nil
}
