package jsrunner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/services/sandbox/egress"
)

// Descriptors of the sandboxed process: 3 result, 4 console logs, 5 bwrap's
// --info-fd (bwrap closes it before node starts).
const (
	resultFD = 3
	logFD    = 4
	infoFD   = 5
)

// outcome is what one bwrap process left behind.
type outcome struct {
	stdout, stderr *capture
	logs           *logCollector
	result         []byte
	resultTooBig   bool
	timedOut       bool
	exitCode       int
}

func (r *Runner) execute(ctx context.Context, timeout time.Duration, dir string, network bool) (outcome, error) {
	out := outcome{
		stdout: &capture{max: r.cfg.MaxOutputBytes},
		stderr: &capture{max: r.cfg.MaxOutputBytes},
		logs:   &logCollector{max: r.cfg.MaxOutputBytes},
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var pipes [3][2]*os.File // result, logs, info: read end, write end
	for i := range pipes {
		rd, wr, err := os.Pipe()
		if err != nil {
			for _, p := range pipes[:i] {
				p[0].Close()
				p[1].Close()
			}
			return out, fmt.Errorf("pipe: %w", err)
		}
		pipes[i] = [2]*os.File{rd, wr}
		defer rd.Close()
	}
	resultR, logR, infoR := pipes[0][0], pipes[1][0], pipes[2][0]

	pid1 := &sandboxPID1{}
	pid1.fd.Store(-1)
	defer pid1.close()
	cmd := exec.CommandContext(runCtx, r.cfg.Bwrap, r.args(dir, network, timeout)...)
	cmd.Dir = "/"
	cmd.Env = sandboxEnv() // also what /proc/1/environ shows inside
	cmd.Stdout, cmd.Stderr = out.stdout, out.stderr
	cmd.ExtraFiles = []*os.File{pipes[0][1], pipes[1][1], pipes[2][1]}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: r.cred}
	cmd.Cancel = func() error {
		if pid1.kill() {
			return nil
		}
		// bwrap has not created the namespaces yet; --die-with-parent takes the rest.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay

	err := cmd.Start()
	for _, p := range pipes {
		p[1].Close()
	}
	if err != nil {
		return out, fmt.Errorf("start bwrap: %w", err)
	}

	var wg sync.WaitGroup
	result := &boundedBuffer{max: r.cfg.MaxResultBytes}
	wg.Go(func() { result.readFrom(resultR) })
	wg.Go(func() { out.logs.readFrom(logR) })
	wg.Go(func() { pid1.readInfo(infoR) })

	waitErr := cmd.Wait()
	deadline := time.Now().Add(waitDelay)
	// Every process that held the pipes is normally gone with bwrap; the timer is
	// a safety net against one that escaped the namespace's end.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		resultR.Close()
		logR.Close()
		infoR.Close()
		<-done
	}
	// No process of the sandbox may outlive Run.
	if err := pid1.waitExit(deadline); err != nil {
		pid1.kill()
		if err := pid1.waitExit(time.Now().Add(waitDelay)); err != nil {
			return out, fmt.Errorf("wait for the sandbox to end: %w", err)
		}
	}
	out.result, out.resultTooBig = result.buf, result.overflow
	out.timedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	out.exitCode = cmd.ProcessState.ExitCode()
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) && runCtx.Err() == nil {
		return out, fmt.Errorf("wait for bwrap: %w", waitErr)
	}
	return out, nil
}

// sandboxEnv is the whole environment of the sandbox.
func sandboxEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"NODE_DISABLE_COLORS=1",
		"MALLOC_ARENA_MAX=2",
	}
}

func (r *Runner) args(dir string, network bool, timeout time.Duration) []string {
	args := []string{
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
		"--cap-drop", "ALL",
		"--hostname", "nova-sandbox",
		"--info-fd", strconv.Itoa(infoFD),
	}
	args = append(args, r.mounts...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--ro-bind", filepath.Join(dir, "in"), "/nova",
	)
	if r.cfg.NodeModules != "" {
		args = append(args, "--ro-bind", r.cfg.NodeModules, nodeModulesPath)
	}
	if network {
		args = append(args, "--ro-bind", filepath.Join(dir, "net"), "/nova-net")
	}
	args = append(args,
		"--size", strconv.FormatInt(r.cfg.DiskBytes, 10), "--tmpfs", "/tmp",
		"--chdir", "/tmp",
		"--clearenv",
	)
	for _, kv := range sandboxEnv() {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	if network && r.systemCAs != "" {
		// Node trusts its own CA bundle; the system's adds local authorities.
		args = append(args, "--setenv", "NODE_EXTRA_CA_CERTS", r.systemCAs)
	}

	args = append(args, "--", r.cfg.Prlimit, "--core=0")
	if r.cfg.MemoryBytes > 0 {
		args = append(args, "--data="+strconv.FormatInt(r.cfg.MemoryBytes, 10))
	}
	if r.cfg.FileSizeBytes > 0 {
		args = append(args, "--fsize="+strconv.FormatInt(r.cfg.FileSizeBytes, 10))
	}
	if r.nproc > 0 {
		args = append(args, "--nproc="+strconv.FormatInt(r.nproc, 10))
	}
	cpu := r.cfg.CPUTime
	if cpu == 0 {
		cpu = 2 * timeout
	}
	if cpu > 0 {
		// Soft limit: SIGXCPU; the hard limit a second later: SIGKILL.
		secs := int64((cpu + time.Second - 1) / time.Second)
		args = append(args, "--cpu="+strconv.FormatInt(secs, 10)+":"+strconv.FormatInt(secs+1, 10))
	}
	args = append(args, "--", r.cfg.Node)
	if r.cfg.MemoryBytes > 0 {
		args = append(args, "--max-old-space-size="+strconv.FormatInt(max(r.cfg.MemoryBytes*3/4>>20, 16), 10))
	}
	mode := "closed"
	if network {
		mode = "network"
	}
	return append(args, runnerPath, strconv.FormatInt(r.cfg.MaxOutputBytes, 10), mode)
}

// serveEgress listens on the run's egress socket in dir and serves every
// connection with policy through the egress proxy, until stop.
func (r *Runner) serveEgress(ctx context.Context, dir string, policy egress.Policy) (stop func(), err error) {
	path := filepath.Join(dir, "egress.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if r.cred != nil {
		if err := os.Lchown(path, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			ln.Close()
			return nil, fmt.Errorf("hand socket to sandbox user: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { r.cfg.Egress.ServeConn(ctx, conn, policy) })
		}
	})
	return func() {
		ln.Close()
		cancel()
		wg.Wait()
	}, nil
}

// systemMounts mounts /usr and what lives beside it read-only. On merged-/usr
// systems /bin, /lib... are symlinks and are recreated as such.
func systemMounts() ([]string, error) {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", p, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", p, err)
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	// Only the public parts of /etc: no passwd, shadow or private keys.
	for _, p := range []string{"/etc/alternatives", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/localtime", "/etc/ld.so.cache"} {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args, nil
}

// capture keeps the first max bytes of a stream and counts the rest; it never
// blocks or fails, so a chatty program is not slowed down by its reader.
type capture struct {
	max     int64
	buf     bytes.Buffer
	dropped int64
}

func (c *capture) Write(p []byte) (int, error) {
	keep := min(int64(len(p)), max(c.max-int64(c.buf.Len()), 0))
	c.buf.Write(p[:keep])
	c.dropped += int64(len(p)) - keep
	return len(p), nil
}

func (c *capture) String() string { return c.buf.String() }

// logCollector reads runner.js's console stream: one JSON string per line. The
// runner caps it too; this cap holds against code that writes to fd 4 itself.
type logCollector struct {
	max     int64
	size    int64
	entries []string
	dropped int64
}

func (l *logCollector) readFrom(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= int(l.max)*6+16 { // a JSON string escapes a byte into at most 6
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return // a line without its newline was cut short by a kill
		}
		l.add(line)
		line = line[:0]
	}
}

func (l *logCollector) add(line []byte) {
	var s string
	if json.Unmarshal(line, &s) != nil {
		s = string(bytes.TrimSuffix(line, []byte("\n")))
	}
	room := l.max - l.size
	if int64(len(s)) > room {
		l.dropped += int64(len(s)) - max(room, 0)
		if room <= 0 {
			return
		}
		s = s[:room]
	}
	l.size += int64(len(s))
	l.entries = append(l.entries, s)
}

// boundedBuffer reads a stream to its end, keeping at most max bytes.
type boundedBuffer struct {
	max      int64
	buf      []byte
	overflow bool
}

func (b *boundedBuffer) readFrom(r io.Reader) {
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 && !b.overflow {
			if int64(len(b.buf)+n) > b.max {
				b.overflow, b.buf = true, nil
			} else {
				b.buf = append(b.buf, chunk[:n]...)
			}
		}
		if err != nil {
			return
		}
	}
}

// sandboxPID1 is the sandbox's pid 1 seen from the host, held as a pidfd so that
// neither a kill nor a wait can hit a recycled pid. Killing it makes the kernel
// kill every process of the pid namespace; it counts as exited once they are all
// gone.
type sandboxPID1 struct {
	fd atomic.Int64 // -1 until bwrap reported the pid
}

// readInfo takes the pid from bwrap's --info-fd.
func (s *sandboxPID1) readInfo(r io.Reader) {
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
func (s *sandboxPID1) kill() bool {
	fd := s.fd.Load()
	return fd >= 0 && unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) == nil
}

// waitExit waits until the pid namespace is empty, at most until deadline.
func (s *sandboxPID1) waitExit(deadline time.Time) error {
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

// close reaps pid 1 if it became our child (when the service is the reaper of
// orphans, as pid 1 of a container); otherwise waitid fails, which is fine.
func (s *sandboxPID1) close() {
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
// that user and must find what it mounts.
func checkSearchable(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("path %q: %w", dir, err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		perm := st.Mode & 0o777
		ok := perm&0o001 != 0 ||
			(st.Uid == cred.Uid && perm&0o100 != 0) ||
			(st.Gid == cred.Gid && perm&0o010 != 0)
		if !ok {
			return fmt.Errorf("%q: %s (mode %o) is not searchable by sandbox user %d; allow it (chmod o+x) or choose another directory", dir, p, perm, cred.Uid)
		}
		if p == "/" {
			return nil
		}
	}
}

var errTrailingData = errors.New("trailing data after JSON value")

// decodeJSON keeps numbers as json.Number so that integers beyond 2^53 survive.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailingData
	}
	return nil
}

func exitText(code int) string {
	switch {
	case code > 128 && code < 128+65:
		return "killed by " + unix.SignalName(syscall.Signal(code-128))
	case code < 0:
		return "killed"
	default:
		return "exit status " + strconv.Itoa(code)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
