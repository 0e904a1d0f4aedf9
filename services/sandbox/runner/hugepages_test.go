package runner

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The zygote moves its preloaded memory into huge pages (fewer page-table
// entries for every fork to copy and every exit to free), and jobs leave it
// there: what the zygote itself does not write to stays in huge pages.
func TestWarmZygoteMemoryInHugePages(t *testing.T) {
	if why := noCollapse(); why != "" {
		t.Skip(why)
	}
	r := newTestRunner(t, Config{Zygotes: 1, LightZygotes: -1})
	for i := range 20 {
		code := "import json\ncontext['i'] = " + strconv.Itoa(i)
		wantSuccess(t, run(t, r, Request{Code: code}), `{"i": `+strconv.Itoa(i)+`}`)
	}
	z := r.pool.pick()
	if z == nil {
		t.Fatal("no ready zygote")
	}
	if z.hugeKB < 2048 {
		t.Errorf("the zygote moved %d KiB of its memory into huge pages, want at least one (2048 KiB)", z.hugeKB)
	}
	if kb := anonHugeKB(t, zygoteProcess(t, z.cmd.Process.Pid)); kb < 2048 {
		t.Errorf("after 20 jobs the zygote holds %d KiB in huge pages, want at least one (of %d KiB moved)", kb, z.hugeKB)
	}
}

// zygoteProcess is the host pid of the zygote that bubblewrap (bwrap, its
// pid on the host) started: bwrap's child (bwrap again, pid 1 of the
// sandbox) started it.
func zygoteProcess(t *testing.T, bwrap int) int {
	t.Helper()
	parents := processParents(t)
	for pid, ppid := range parents {
		if parents[ppid] == bwrap && isZygote(pid) {
			return pid
		}
	}
	t.Fatalf("no zygote under bwrap %d", bwrap)
	return 0
}

func isZygote(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	args := strings.Split(string(b), "\x00")
	return err == nil && len(args) > 2 && strings.HasSuffix(args[1], "runner.py") && args[2] == "zygote"
}

// processParents maps every host process to its parent.
func processParents(t *testing.T) map[int]int {
	t.Helper()
	parents := make(map[int]int)
	for _, p := range processStats(t) {
		parents[p.pid] = p.ppid
	}
	return parents
}

func anonHugeKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			kb, _ := strconv.Atoi(strings.Fields(v)[0]) // "<n> kB"
			return kb
		}
	}
	return 0
}

// noCollapse says why this kernel cannot move memory into huge pages on
// request (MADV_COLLAPSE, Linux 6.1, THP not "never"), or "".
func noCollapse() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err.Error()
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil || major < 6 || major == 6 && minor < 1 {
		return "kernel " + release + " has no MADV_COLLAPSE"
	}
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "no transparent huge pages: " + err.Error()
	}
	if strings.Contains(string(b), "[never]") {
		return "transparent huge pages are off ([never])"
	}
	return ""
}
