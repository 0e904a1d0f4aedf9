package jsrunner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/services/sandbox/egress"
	"github.com/novaflow/nova/services/sandbox/isolation"
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

	pid1 := isolation.NewPID1()
	defer pid1.Close()
	cmd := exec.CommandContext(runCtx, r.cfg.Bwrap, r.args(dir, network, timeout)...)
	cmd.Dir = "/"
	cmd.Env = sandboxEnv() // also what /proc/1/environ shows inside
	cmd.Stdout, cmd.Stderr = out.stdout, out.stderr
	cmd.ExtraFiles = []*os.File{pipes[0][1], pipes[1][1], pipes[2][1]}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: r.cred}
	cmd.Cancel = func() error {
		if pid1.Kill() {
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
	wg.Go(func() { pid1.ReadInfo(infoR) })

	waitErr := cmd.Wait()
	deadline := time.Now().Add(waitDelay)
	// Every process that held the pipes is normally gone with bwrap; the
	// deadline is a safety net against one that escaped the namespace's end.
	isolation.AwaitReaders(&wg, deadline, resultR, logR, infoR)
	// No process of the sandbox may outlive Run.
	if err := pid1.End(deadline, waitDelay); err != nil {
		return out, fmt.Errorf("wait for the sandbox to end: %w", err)
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
	var binds []string
	if r.cfg.NodeModules != "" {
		binds = append(binds, "--ro-bind", r.cfg.NodeModules, nodeModulesPath)
	}
	if network {
		binds = append(binds, "--ro-bind", filepath.Join(dir, "net"), "/nova-net")
	}
	env := sandboxEnv()
	if network && r.systemCAs != "" {
		// Node trusts its own CA bundle; the system's adds local authorities.
		env = append(env, "NODE_EXTRA_CA_CERTS="+r.systemCAs)
	}
	args := isolation.Sandbox{
		InfoFD:    infoFD,
		System:    r.mounts,
		In:        filepath.Join(dir, "in"),
		Binds:     binds,
		DiskBytes: r.cfg.DiskBytes,
		Env:       env,
	}.Args()

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
	if err := isolation.Chown(r.cred, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hand socket to sandbox user: %w", err)
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
