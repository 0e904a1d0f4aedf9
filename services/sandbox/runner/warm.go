package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/services/sandbox/isolation"
)

// Warm starts. A zygote is runner.py started in bubblewrap in "zygote" mode:
// root of its own user namespace with CAP_SYS_ADMIN, CAP_NET_ADMIN,
// CAP_SETPCAP and CAP_SETFCAP there (to make each job's namespaces; nothing on
// the host), no network, read-only root and /dev. It imports the heavy modules
// once and never runs user code. For each execution the service sends it, over
// its control socket, a header and the job's descriptors (SCM_RIGHTS): a
// control socket of the job, stdout, stderr, the result pipe, the code and the
// context (memfds) and, with network, the egress broker. The zygote hands them
// to a spare process it forked in advance, pid 1 of fresh pid, mount, network,
// ipc and uts namespaces, which enters a nested user namespace and runs the
// code; the zygote keeps the job's control socket and reports there once none
// of the job's processes is left (runner.py explains the process layout).

const (
	zygoteReadyTimeout = 60 * time.Second
	// watchdogGrace is how long past the job's wall time the service waits for
	// the job's own watchdog before it gives the zygote up.
	watchdogGrace = 5 * time.Second
)

// errHandOver means the job never reached a zygote: nothing of it ran.
var errHandOver = errors.New("job not handed over to the zygote")

type pool struct {
	r      *Runner
	light  bool // its zygotes import only standard modules
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// idle is how long a zygote of the pool may go without a job before it
	// is stopped (Config.ZygoteIdle; 0: never); wake asks a slot whose
	// zygote was stopped so to start one again.
	idle time.Duration
	wake chan struct{}

	mu    sync.Mutex
	ready []*zygote
	next  int
	// modules is what its last ready zygote said it has loaded (nil before).
	modules atomic.Pointer[zygoteModules]
}

// zygoteModules is what a zygote's ready message tells of the modules: the
// top-level names it has loaded, and those of Python's standard library.
type zygoteModules struct {
	loaded, standard map[string]bool
}

func newPool(r *Runner, n int, light bool) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{r: r, light: light, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
	if !light {
		p.idle = r.cfg.ZygoteIdle
	}
	for slot := range n {
		p.wg.Go(func() { p.keep(slot) })
	}
	return p
}

// keep runs one zygote slot: starts a zygote, and a new one whenever it dies,
// backing off while they keep failing.
func (p *pool) keep(slot int) {
	log := p.r.cfg.Logger.With("zygote", p.name(slot))
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	wait := func() bool {
		select {
		case <-p.ctx.Done():
			return false
		case <-time.After(backoff):
			backoff = min(backoff*2, 30*time.Second)
			return true
		}
	}
	for p.ctx.Err() == nil {
		started := time.Now()
		z, err := p.r.startZygote(p.ctx, p, slot)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			log.Warn("sandbox zygote did not start; runs go cold meanwhile", "err", err, "retry_in", backoff)
			if !wait() {
				return
			}
			continue
		}
		log.Debug("sandbox zygote ready", "startup", time.Since(started))
		p.modules.Store(z.modules)
		p.add(z)
		idle := p.watch(z, log)
		z.stop()
		if idle {
			log.Info("sandbox zygote stopped: no program needed it for a while; the next that does starts it again and runs meanwhile on a light zygote (or cold)",
				"idle", p.idle)
			backoff = minBackoff
			if !p.awaitWake() {
				return
			}
			continue
		}
		if time.Since(started) > time.Minute {
			backoff = minBackoff
		} else if p.ctx.Err() == nil && !wait() {
			return
		}
	}
}

// watch waits until the ready zygote z dies, the pool closes or, with
// p.idle set, z has run no job for p.idle (then true); z is no longer ready
// when it returns. log is the slot's.
func (p *pool) watch(z *zygote, log *slog.Logger) (idle bool) {
	var tick <-chan time.Time
	if p.idle > 0 {
		t := time.NewTicker(max(p.idle/4, 10*time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-z.dead:
			p.remove(z)
			log.Warn("sandbox zygote ended; starting a new one", "reason", z.deathReason())
			return false
		case <-p.ctx.Done():
			p.remove(z)
			return false
		case <-tick:
			if p.removeIfIdle(z) {
				return true
			}
		}
	}
}

// removeIfIdle takes z out of the ready ones if it has no job and has had
// none for p.idle. take counts a job on a zygote under the same lock, so none
// can be handed to z after this.
func (p *pool) removeIfIdle(z *zygote) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if z.inflight.Load() > 0 || time.Since(z.lastJob) < p.idle {
		return false
	}
	p.removeLocked(z)
	return true
}

// awaitWake waits for a program that wants a zygote of the pool (false when
// the pool closes first).
func (p *pool) awaitWake() bool {
	select {
	case <-p.wake:
		return true
	case <-p.ctx.Done():
		return false
	}
}

func (p *pool) add(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	z.lastJob = time.Now()
	p.ready = append(p.ready, z)
	// A request for a zygote made while none was ready is served by this one.
	select {
	case <-p.wake:
	default:
	}
}

func (p *pool) remove(z *zygote) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.removeLocked(z)
}

func (p *pool) removeLocked(z *zygote) {
	for i, x := range p.ready {
		if x == z {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			return
		}
	}
}

func (p *pool) readyCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// pick returns the ready zygote with the fewest jobs, rotating among equals.
func (p *pool) pick() *zygote {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pickLocked()
}

// take is pick with a job counted on the zygote it returns (the caller
// releases it with z.inflight.Add(-1)). When none is ready it asks a slot
// whose zygote was stopped for idleness to start one.
func (p *pool) take() *zygote {
	p.mu.Lock()
	defer p.mu.Unlock()
	z := p.pickLocked()
	if z == nil {
		select {
		case p.wake <- struct{}{}:
		default:
		}
		return nil
	}
	z.inflight.Add(1)
	z.lastJob = time.Now()
	return z
}

func (p *pool) pickLocked() *zygote {
	var best *zygote
	n := len(p.ready)
	for i := range n {
		z := p.ready[(p.next+i)%n]
		select {
		case <-z.dead: // not yet removed by its keeper
			continue
		default:
		}
		if best == nil || z.inflight.Load() < best.inflight.Load() {
			best = z
		}
	}
	p.next++
	return best
}

func (p *pool) close() {
	p.cancel()
	p.wg.Wait()
}

// name names a zygote of the pool in logs: its slot, "light-" before it in
// the light pool.
func (p *pool) name(slot int) string {
	if p.light {
		return "light-" + strconv.Itoa(slot)
	}
	return strconv.Itoa(slot)
}

// run runs the job on one of the pool's zygotes; ran is false when none of
// them took it (none ready, or each refused it before anything ran).
func (p *pool) run(ctx context.Context, j *job) (out outcome, ran bool, err error) {
	for range 2 {
		z := p.take()
		if z == nil {
			break
		}
		out, err = z.run(ctx, j)
		z.inflight.Add(-1)
		if errors.Is(err, errHandOver) {
			p.r.cfg.Logger.Warn("sandbox zygote refused a job; trying elsewhere", "zygote", p.name(z.slot), "sandbox_id", j.id, "err", err)
			continue
		}
		out.warm = true
		return out, true, err
	}
	return outcome{}, false, nil
}

// runWarm runs the job on a zygote, the light ones first when the program
// fits them (fitsLight), or cold when no zygote is ready.
func (r *Runner) runWarm(ctx context.Context, j *job) (outcome, error) {
	pools := []*pool{r.pool}
	if r.light != nil {
		if r.fitsLight(j.req.Code) {
			pools = []*pool{r.light, r.pool}
		} else {
			pools = append(pools, r.light)
		}
	}
	for _, p := range pools {
		if out, ran, err := p.run(ctx, j); ran {
			return out, err
		}
	}
	return r.runCold(ctx, j)
}

// fitsLight tells whether a program runs as fast on a light zygote as on a
// full one: every module its import statements name is standard and either
// loaded in the light zygotes or not in the full ones (nothing the full ones
// preloaded for it). A program whose imports cannot be read for certain, or
// that imports anything else, goes to the full ones, whose preloaded modules
// it may need; either way it runs the same, only its imports' time differs.
func (r *Runner) fitsLight(code string) bool {
	light := r.light.modules.Load()
	if light == nil {
		return false
	}
	names, ok := importedModules(code)
	if !ok {
		return false
	}
	full := r.pool.modules.Load()
	for _, name := range names {
		if !light.standard[name] || !light.loaded[name] && full != nil && full.loaded[name] {
			return false
		}
	}
	return true
}

type zygote struct {
	slot   int
	logger *slog.Logger
	cmd    *exec.Cmd
	ctl    *net.UnixConn
	init   *isolation.PID1
	wg     sync.WaitGroup // the goroutines watching the zygote

	sendMu sync.Mutex
	// inflight counts the jobs handed to it or about to be (pool.take).
	inflight atomic.Int32
	lastJob  time.Time // when the last job was taken, guarded by the pool's mu

	dead     chan struct{}
	deadOnce sync.Once
	reason   string // why it died, set before dead is closed
	waited   chan struct{}

	hugeKB  int64 // of the zygote's memory, moved into huge pages once its modules were loaded
	modules *zygoteModules
}

func (z *zygote) markDead(reason string) {
	z.deadOnce.Do(func() {
		z.reason = reason
		close(z.dead)
	})
}

func (z *zygote) deathReason() string {
	<-z.dead
	return z.reason
}

// kill ends the zygote's whole sandbox at once, jobs included.
func (z *zygote) kill() {
	if !z.init.Kill() {
		_ = syscall.Kill(-z.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// stop asks the zygote to end (it ends when its control socket closes), kills
// it if it does not, and waits until nothing of it is left.
func (z *zygote) stop() {
	z.markDead("stopped")
	z.ctl.Close()
	select {
	case <-z.waited:
	case <-time.After(2 * time.Second):
		z.kill()
		<-z.waited
	}
	if err := z.init.WaitExit(time.Now().Add(waitDelay)); err != nil {
		z.kill()
		_ = z.init.WaitExit(time.Now().Add(waitDelay))
	}
	z.wg.Wait()
	z.init.Close()
}

func (r *Runner) zygoteArgs(config string) []string {
	args := []string{
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
		// Root of its own user namespace, with what it takes to give each job
		// namespaces of its own; nothing on the host. Jobs drop everything.
		"--uid", "0", "--gid", "0",
		"--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_NET_ADMIN",
		"--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_SETFCAP",
		"--hostname", "nova-sandbox",
		"--info-fd", "4",
	}
	args = append(args, r.mounts...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--dir", "/tmp",
		"--ro-bind-data", "5", runnerInside,
		// Shared by every job of the zygote: nothing there may be writable.
		"--remount-ro", "/",
		"--remount-ro", "/dev",
		"--chdir", "/",
	)
	args = append(args, isolation.EnvArgs(r.env)...)
	return append(args, "--", r.cfg.Python, runnerInside, "zygote", config)
}

// startZygote starts a zygote and waits until it is ready.
func (r *Runner) startZygote(ctx context.Context, p *pool, slot int) (*zygote, error) {
	config, err := json.Marshal(map[string]any{
		"preload": r.cfg.Preload,
		"light":   p.light,
		"shm":     min(r.cfg.DiskBytes, 64<<20),
		"disk":    r.cfg.DiskBytes,
		"spares":  2,
	})
	if err != nil {
		return nil, err
	}
	files, err := openZygoteFiles()
	if err != nil {
		return nil, err
	}
	defer files.closeChildEnds()

	z := &zygote{
		slot:   slot,
		logger: r.cfg.Logger.With("zygote", p.name(slot)),
		ctl:    files.ctl,
		init:   isolation.NewPID1(),
		dead:   make(chan struct{}),
		waited: make(chan struct{}),
	}
	stderr := &lineLogger{logger: z.logger, msg: "sandbox zygote output"}
	if err := z.start(r, string(config), files, stderr); err != nil {
		files.ctl.Close()
		files.infoR.Close()
		return nil, err
	}
	ready, err := z.awaitReady(ctx)
	if err != nil {
		z.stop()
		return nil, fmt.Errorf("zygote not ready: %w (output: %s)", err, stderr.tail())
	}
	z.hugeKB = ready.HugeKB
	z.modules = &zygoteModules{loaded: set(ready.Modules), standard: set(ready.Standard)}
	z.logger.Debug("sandbox zygote ready", "modules", ready.Loaded, "huge_pages_kb", ready.HugeKB)
	for name, why := range ready.Failed {
		z.logger.Warn("module not importable in the sandbox", "module", name, "err", why)
	}
	z.wg.Go(func() {
		// The zygote sends nothing more: a read ends when it does.
		_, err := z.ctl.Read(make([]byte, 1))
		z.markDead(fmt.Sprintf("control channel closed (%v)", err))
	})
	return z, nil
}

// zygoteFiles are the descriptors a zygote starts with, and our ends of them.
type zygoteFiles struct {
	ctl    *net.UnixConn // our end of its control socket
	theirs *os.File      // its end of the control socket (fd 3)
	infoR  *os.File      // where bwrap's --info-fd tells the sandbox's pid 1
	infoW  *os.File      // bwrap's --info-fd (fd 4)
	script *os.File      // runner.py for --ro-bind-data (fd 5)
}

// openZygoteFiles opens a zygote's descriptors; on an error it closes those
// it opened.
func openZygoteFiles() (*zygoteFiles, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote-control"), os.NewFile(uintptr(fds[1]), "zygote-control")
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	f := &zygoteFiles{ctl: c.(*net.UnixConn), theirs: theirs}
	f.infoR, f.infoW, err = os.Pipe()
	if err != nil {
		f.ctl.Close()
		f.theirs.Close()
		return nil, fmt.Errorf("info pipe: %w", err)
	}
	f.script, err = memfd("runner.py", runnerScript)
	if err != nil {
		f.ctl.Close()
		f.infoR.Close()
		f.closeChildEnds()
		return nil, err
	}
	return f, nil
}

// closeChildEnds closes the zygote's ends: once it has them, ours must be
// the only ones left so that its end shows as the end of our reads.
func (f *zygoteFiles) closeChildEnds() {
	f.theirs.Close()
	f.infoW.Close()
	if f.script != nil {
		f.script.Close()
	}
}

// start starts the zygote's bubblewrap with files and the goroutines that
// read its pid 1 and wait for its end.
func (z *zygote) start(r *Runner, config string, files *zygoteFiles, stderr *lineLogger) error {
	z.cmd = exec.Command(r.cfg.Bwrap, r.zygoteArgs(config)...)
	z.cmd.Dir = "/"
	z.cmd.Env = r.env
	z.cmd.Stdout, z.cmd.Stderr = stderr, stderr
	z.cmd.ExtraFiles = []*os.File{files.theirs, files.infoW, files.script}
	z.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: r.cred,
	}
	if err := z.cmd.Start(); err != nil {
		return fmt.Errorf("start bwrap: %w", err)
	}
	files.closeChildEnds()
	infoR := files.infoR
	z.wg.Go(func() {
		defer infoR.Close()
		z.init.ReadInfo(infoR)
	})
	z.wg.Go(func() {
		err := z.cmd.Wait()
		z.markDead(fmt.Sprintf("exited (%v)", err))
		close(z.waited)
	})
	return nil
}

// zygoteReady is a zygote's first message: its modules are loaded.
type zygoteReady struct {
	Ready    bool              `json:"ready"`
	Loaded   []string          `json:"loaded"`
	Failed   map[string]string `json:"failed"`
	HugeKB   int64             `json:"huge_pages_kb"`
	Modules  []string          `json:"modules"`
	Standard []string          `json:"standard"`
}

// awaitReady reads the zygote's ready message, giving up after
// zygoteReadyTimeout or when ctx ends.
func (z *zygote) awaitReady(ctx context.Context) (zygoteReady, error) {
	var ready zygoteReady
	_ = z.ctl.SetReadDeadline(time.Now().Add(zygoteReadyTimeout))
	stop := context.AfterFunc(ctx, func() { _ = z.ctl.SetReadDeadline(time.Now()) })
	buf := make([]byte, 64<<10)
	n, err := z.ctl.Read(buf)
	stop()
	if err == nil {
		err = json.Unmarshal(buf[:n], &ready)
	}
	if err == nil && !ready.Ready {
		err = errors.New("no ready message")
	}
	if err != nil {
		return ready, err
	}
	_ = z.ctl.SetReadDeadline(time.Time{})
	return ready, nil
}

// run hands the job to the zygote and waits until its report says that none of
// its processes is left; the caller counts the job in z.inflight (pool.take).
func (z *zygote) run(ctx context.Context, j *job) (outcome, error) {
	files := &jobFiles{}
	defer files.close()
	if err := files.open(j); err != nil {
		return outcome{exitCode: -1}, err
	}
	if err := z.handOver(j, files); err != nil {
		return outcome{exitCode: -1}, err
	}
	report, rep, repErr := z.supervise(ctx, j, files)
	return reportOutcome(j, report, rep, repErr)
}

// jobFiles are the descriptors of one job on a zygote.
type jobFiles struct {
	ctl *net.UnixConn // our end of the job's control socket
	// readers are our ends of the job's stdout, stderr and result pipes.
	readers []*os.File
	// theirs go to the zygote: the job's control socket, the write ends of
	// the pipes, the code and the context; closed once handed over.
	theirs []*os.File
}

func (f *jobFiles) open(j *job) error {
	ctlFDs, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("job control socket: %w", err)
	}
	ctlOurs := os.NewFile(uintptr(ctlFDs[0]), "job-control")
	f.theirs = append(f.theirs, os.NewFile(uintptr(ctlFDs[1]), "job-control"))
	c, err := net.FileConn(ctlOurs)
	ctlOurs.Close()
	if err != nil {
		return fmt.Errorf("job control socket: %w", err)
	}
	f.ctl = c.(*net.UnixConn)
	for range 3 { // stdout, stderr, result
		pr, pw, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("pipe: %w", err)
		}
		f.readers, f.theirs = append(f.readers, pr), append(f.theirs, pw)
	}
	code, err := memfd("code", []byte(j.req.Code))
	if err != nil {
		return err
	}
	f.theirs = append(f.theirs, code)
	contextFile, err := memfd("context", nil)
	if err != nil {
		return err
	}
	f.theirs = append(f.theirs, contextFile)
	return encodeContext(contextFile, j.req.Context)
}

func (f *jobFiles) close() {
	if f.ctl != nil {
		f.ctl.Close()
	}
	for _, x := range append(f.readers, f.theirs...) {
		x.Close()
	}
}

// handOver sends the job's header and descriptors to the zygote. A zygote
// that cannot take them is given up: errHandOver says nothing of the job ran.
func (z *zygote) handOver(j *job, files *jobFiles) error {
	fds := make([]int, 0, 7)
	for _, f := range files.theirs {
		fds = append(fds, int(f.Fd()))
	}
	if j.broker != nil {
		fds = append(fds, int(j.broker.Fd()))
	}
	header, err := json.Marshal(j.limits.config(j.id, j.broker != nil))
	if err != nil {
		return err
	}

	z.sendMu.Lock()
	_, _, err = z.ctl.WriteMsgUnix(header, unix.UnixRights(fds...), nil)
	z.sendMu.Unlock()
	if err != nil {
		z.markDead("job hand-over failed: " + err.Error())
		z.kill()
		return fmt.Errorf("%w: %v", errHandOver, err)
	}
	for _, f := range files.theirs {
		f.Close()
	}
	files.theirs = nil
	return nil
}

// jobReport is the report of a job's supervisor (the zygote).
type jobReport struct {
	Fault  string   `json:"fault"`
	Done   bool     `json:"done"`
	Limit  string   `json:"limit"`
	Exit   *int     `json:"exit"`
	Signal int      `json:"signal"`
	CPU    *float64 `json:"cpu"`
}

// supervise collects the job's output while it runs, passes the end of ctx,
// kill requests and the end of its result on to the zygote, and returns the
// zygote's report (nil without one) once the output is collected.
func (z *zygote) supervise(ctx context.Context, j *job, files *jobFiles) (report []byte, rep jobReport, repErr error) {
	complete := make(chan struct{})
	j.result.complete = func() { close(complete) }
	defer func() { j.result.complete = nil }() // a cold retry must not call it
	var wg sync.WaitGroup
	defer wg.Wait()
	readers := files.readers
	wg.Go(func() { drainTo(j.stdout, readers[0]) })
	wg.Go(func() { drainTo(j.stderr, readers[1]) })
	wg.Go(func() { j.result.readFrom(readers[2]) })
	reports := make(chan []byte, 1)
	wg.Go(func() { reports <- readReport(files.ctl) })

	report = z.awaitReport(ctx, j, files.ctl, reports, complete)
	repErr = json.Unmarshal(report, &rep)
	if rep.Done {
		// Every process of the job has SIGKILL pending and will not run again;
		// take what the pipes hold and do not wait for the processes to be torn down.
		for _, f := range readers[:2] {
			_ = f.SetReadDeadline(time.Now())
		}
	}
	// Otherwise the report comes once no process of the job is left, so the
	// pipes are at their end; the timer is a safety net.
	pipes := make(chan struct{})
	go func() {
		wg.Wait()
		close(pipes)
	}()
	select {
	case <-pipes:
	case <-time.After(waitDelay):
		for _, f := range readers {
			f.Close()
		}
		<-pipes
	}
	j.stdout.lines.endLine()
	return report, rep, repErr
}

// awaitReport waits for the zygote's report on the job's control socket
// jobCtl, telling the zygote meanwhile what the service wants of the job; a
// zygote whose job outlives its watchdog is killed.
func (z *zygote) awaitReport(ctx context.Context, j *job, jobCtl *net.UnixConn, reports <-chan []byte, complete <-chan struct{}) []byte {
	watchdog := time.NewTimer(j.limits.timeout + watchdogGrace)
	defer watchdog.Stop()
	done := ctx.Done()
	for {
		select {
		case report := <-reports:
			return report
		case <-done:
			done = nil
			_ = jobCtl.CloseWrite() // the zygote kills the job, then reports
		case reason := <-j.killReq:
			msg, _ := json.Marshal(map[string]string{"kill": reason})
			_, _ = jobCtl.Write(msg)
		case <-complete:
			complete = nil
			_, _ = jobCtl.Write([]byte(`{"kill":"done"}`))
		case <-watchdog.C:
			z.logger.Error("sandbox job watchdog did not end the job in time; killing the zygote", "sandbox_id", j.id)
			z.markDead("job watchdog unresponsive")
			z.kill()
		}
	}
}

// reportOutcome turns the zygote's report (rep, decoded from report with
// repErr) into the job's outcome.
func reportOutcome(j *job, report []byte, rep jobReport, repErr error) (outcome, error) {
	out := outcome{exitCode: -1}
	if len(report) == 0 {
		if len(j.result.buf) == 0 && j.stdout.buf.Len() == 0 && j.stderr.buf.Len() == 0 {
			// The zygote died before the program started: it can run elsewhere.
			return out, fmt.Errorf("%w: the zygote ended before the program started", errHandOver)
		}
		return out, errors.New("the job ended without a report from its supervisor (the zygote died or was killed)")
	}
	if repErr != nil {
		return out, fmt.Errorf("unreadable report of the job's supervisor: %w", repErr)
	}
	if rep.Fault != "" {
		return out, fmt.Errorf("%w: %s", errHandOver, rep.Fault)
	}
	switch rep.Limit {
	case LimitWallTime, LimitOutput:
		out.limit = rep.Limit
	}
	if rep.Exit != nil {
		out.exitCode = *rep.Exit
	}
	out.signal = syscall.Signal(rep.Signal)
	if rep.CPU != nil {
		out.cpu, out.cpuKnown = time.Duration(*rep.CPU*float64(time.Second)), true
	}
	return out, nil
}

// readReport reads the report of the job's supervisor (the zygote) from the
// job's control socket; nil when the socket closed without one.
//
// The zygote sends its report and closes the socket at once, and a message of
// ours ("done", a kill) may reach it after it stopped reading. A SEQPACKET socket closed with
// unread messages flags ECONNRESET on its peer, and the kernel reports that
// error on the next read even when the report is queued before it: the read
// after returns the report (or the end of the stream). Taking that error for
// the end would turn a finished run into a sandbox fault.
func readReport(c *net.UnixConn) []byte {
	buf := make([]byte, 4096)
	for range 3 { // the error is reported once, then cleared
		n, err := c.Read(buf)
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			continue
		case err != nil:
			return nil
		}
		return buf[:n]
	}
	return nil
}

// memfd returns an anonymous in-memory file holding data.
func memfd(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("nova-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if len(data) > 0 {
		if _, err := f.Write(data); err != nil {
			f.Close()
			return nil, fmt.Errorf("memfd %s: %w", name, err)
		}
		// Readers such as bwrap's --ro-bind-data start at the current offset.
		if _, err := f.Seek(0, 0); err != nil {
			f.Close()
			return nil, fmt.Errorf("memfd %s: %w", name, err)
		}
	}
	return f, nil
}

// lineLogger logs what a zygote prints (its own tracebacks: a job's output
// goes to the job), line by line, and keeps the last lines for errors.
type lineLogger struct {
	logger *slog.Logger
	msg    string
	mu     sync.Mutex
	line   []byte
	last   []string
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(l.line) < 4096 {
				l.line = append(l.line, p[:min(len(p), 4096-len(l.line))]...)
			}
			break
		}
		if len(l.line) < 4096 {
			l.line = append(l.line, p[:min(i, 4096-len(l.line))]...)
		}
		line := string(l.line)
		l.line = l.line[:0]
		p = p[i+1:]
		l.logger.Warn(l.msg, "line", line)
		l.last = append(l.last, line)
		if len(l.last) > 20 {
			l.last = l.last[1:]
		}
	}
	return n, nil
}

func (l *lineLogger) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(append(l.last, string(l.line)), "\n")
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
