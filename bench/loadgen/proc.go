package loadgen

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GroupSample is the CPU used so far by a process and its descendants: the
// process's own (Main), and that of every live descendant plus what the
// reaped ones used (Children); and their PSS now. Descendants are found by
// parent pid, since sandboxed programs run in their own sessions.
type GroupSample struct {
	Main, Children time.Duration
	PSSMiB         float64 // the group's
	PSSMainMiB     float64 // the process's own
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTick = 100

type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime time.Duration
}

// SampleGroup samples process root and its descendants.
func SampleGroup(root int) (GroupSample, error) {
	var s GroupSample
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	stats := map[int]procStat{}
	kids := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
		if len(f) < 15 {
			continue
		}
		tick := func(i int) time.Duration {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return time.Duration(v) * time.Second / clockTick
		}
		ppid, _ := strconv.Atoi(f[1])
		stats[pid] = procStat{ppid: ppid, utime: tick(11), stime: tick(12), cutime: tick(13), cstime: tick(14)}
		kids[ppid] = append(kids[ppid], pid)
	}
	rs, ok := stats[root]
	if !ok {
		return s, fmt.Errorf("process %d is gone", root)
	}
	s.Main = rs.utime + rs.stime
	s.Children = rs.cutime + rs.cstime
	s.PSSMainMiB = pssOf(root)
	s.PSSMiB = s.PSSMainMiB
	queue := slices.Clone(kids[root])
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		st := stats[pid]
		s.Children += st.utime + st.stime + st.cutime + st.cstime
		s.PSSMiB += pssOf(pid)
		queue = append(queue, kids[pid]...)
	}
	return s, nil
}

// pssOf reads a process's proportional set size in MiB (0 when unreadable).
func pssOf(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// Usage is a process's CPU time (user and system, its own and its waited
// children's) and RSS from /proc.
func Usage(pid int) (cpu time.Duration, rssKiB int64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return time.Duration(ticks) * time.Second / 100, rssKiB, nil // USER_HZ is 100 on Linux
}
