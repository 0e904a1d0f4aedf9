package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var errTrailingData = errors.New("trailing data after JSON value")

// writeContext writes the context to a new file at path as JSON.
func writeContext(path string, values map[string]any) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write context: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("write context: %w", cerr)
		}
	}()
	return encodeContext(f, values)
}

// encodeContext streams the context to w as JSON; a nil context is {}.
func encodeContext(w io.Writer, values map[string]any) error {
	if values == nil {
		values = map[string]any{}
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(values); err != nil {
		return fmt.Errorf("encode context: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write context: %w", err)
	}
	return nil
}

// boundedBuffer reads a stream to its end, keeping at most max bytes.
type boundedBuffer struct {
	max      int64
	buf      []byte
	overflow bool
	// complete, when set, is called once the stream has carried a newline: the
	// runner's report is complete (a JSON report has no other newline).
	complete func()
}

func (b *boundedBuffer) readFrom(r io.Reader) {
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 && b.complete != nil && bytes.IndexByte(chunk[:n], '\n') >= 0 {
			b.complete()
			b.complete = nil
		}
		if n > 0 {
			if int64(len(b.buf)+n) > b.max {
				b.overflow, b.buf = true, nil
			}
			if !b.overflow {
				b.buf = append(b.buf, chunk[:n]...)
			}
		}
		if err != nil {
			return
		}
	}
}

// sandboxInit is the sandbox's pid 1 seen from the host, held as a pidfd so that
// neither a kill nor a wait can hit a recycled pid. Killing it makes the kernel
// kill every process of the pid namespace, and it counts as exited only once they
// are all gone. bwrap's monitor may exit before that, so Run waits on it.
type sandboxInit struct {
	fd atomic.Int64 // -1 until bwrap reported the pid
}

func newSandboxInit() *sandboxInit {
	s := &sandboxInit{}
	s.fd.Store(-1)
	return s
}

// readInfo takes the pid from bwrap's --info-fd.
func (s *sandboxInit) readInfo(r io.Reader) {
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(r).Decode(&info); err == nil && info.ChildPID > 0 {
		if fd, err := unix.PidfdOpen(info.ChildPID, 0); err == nil {
			s.fd.Store(int64(fd))
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// kill reports false when the pid is not known yet.
func (s *sandboxInit) kill() bool {
	fd := s.fd.Load()
	return fd >= 0 && unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) == nil
}

// waitExit waits until the pid namespace is empty, at most until deadline.
func (s *sandboxInit) waitExit(deadline time.Time) error {
	fd := s.fd.Load()
	if fd < 0 {
		return nil
	}
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return errors.New("sandbox processes still alive")
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return fmt.Errorf("poll pidfd: %w", err)
		case n > 0:
			return nil
		}
	}
}

// close reaps the exited pid 1 if it became our child: bwrap's monitor may exit
// before it, and when the service is the reaper of orphans (pid 1 of a container)
// nobody else would. Otherwise waitid fails with ECHILD, which is fine.
func (s *sandboxInit) close() {
	if fd := s.fd.Swap(-1); fd >= 0 {
		_ = unix.Waitid(unix.P_PIDFD, int(fd), nil, unix.WEXITED|unix.WNOHANG, nil)
		_ = unix.Close(int(fd))
	}
}

// removeTree removes dir even when the code left directories without write or
// search permission in it.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// checkSearchable fails when the sandbox user could not reach dir: bwrap runs as
// that user and must find the per-execution directories it mounts.
func checkSearchable(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return fmt.Errorf("work dir: stat %s: %w", p, err)
		}
		perm := st.Mode & 0o777
		ok := perm&0o001 != 0 ||
			(st.Uid == cred.Uid && perm&0o100 != 0) ||
			(st.Gid == cred.Gid && perm&0o010 != 0)
		if !ok {
			return fmt.Errorf("work dir %q: %s (mode %o) is not searchable by sandbox user %d; allow it (chmod o+x) or choose another work dir", dir, p, perm, cred.Uid)
		}
		if p == "/" {
			return nil
		}
	}
}
