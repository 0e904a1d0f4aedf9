package isolation

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// PID1 is the sandbox's pid 1 seen from the host, held as a pidfd so that
// neither a kill nor a wait can hit a recycled pid. Killing it makes the kernel
// kill every process of the pid namespace, and it counts as exited only once
// they are all gone. bwrap's monitor may exit before that, so a run waits on it
// (End) before it ends.
type PID1 struct {
	fd atomic.Int64 // -1 until bwrap reported the pid
}

// NewPID1 returns a pid 1 not known yet: Kill and WaitExit do nothing until
// ReadInfo has read the pid.
func NewPID1() *PID1 {
	p := &PID1{}
	p.fd.Store(-1)
	return p
}

// ReadInfo takes the pid from bwrap's --info-fd, reading r to its end.
func (p *PID1) ReadInfo(r io.Reader) {
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(r).Decode(&info); err == nil && info.ChildPID > 0 {
		if fd, err := unix.PidfdOpen(info.ChildPID, 0); err == nil {
			p.fd.Store(int64(fd))
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// Kill reports false when the pid is not known yet.
func (p *PID1) Kill() bool {
	fd := p.fd.Load()
	return fd >= 0 && unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) == nil
}

// WaitExit waits until the pid namespace is empty, at most until deadline.
func (p *PID1) WaitExit(deadline time.Time) error {
	fd := p.fd.Load()
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

// End waits until the pid namespace is empty, at most until deadline; then it
// kills what is left and waits up to grace more. It fails only when processes
// of the sandbox survive that.
func (p *PID1) End(deadline time.Time, grace time.Duration) error {
	if err := p.WaitExit(deadline); err != nil {
		p.Kill()
		if err := p.WaitExit(time.Now().Add(grace)); err != nil {
			return err
		}
	}
	return nil
}

// Close reaps the exited pid 1 if it became our child: bwrap's monitor may exit
// before it, and when the service is the reaper of orphans (pid 1 of a
// container) nobody else would. Otherwise waitid fails with ECHILD, which is fine.
func (p *PID1) Close() {
	if fd := p.fd.Swap(-1); fd >= 0 {
		_ = unix.Waitid(unix.P_PIDFD, int(fd), nil, unix.WEXITED|unix.WNOHANG, nil)
		_ = unix.Close(int(fd))
	}
}

// AwaitReaders waits until the goroutines of wg, which read pipes, are done. A
// process that escaped the end of the sandbox could hold a pipe open forever, so
// at deadline it closes the pipes, which ends their reads.
func AwaitReaders(wg *sync.WaitGroup, deadline time.Time, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		for _, f := range pipes {
			f.Close()
		}
		<-done
	}
}
