package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of the times in /proc/<pid>/stat.
const clockTick = 100

// usage is what processes used: CPU time (user and system) and minor page
// faults (a fork's copy-on-write faults among them).
type usage struct {
	cpu    time.Duration
	faults int64
}

func (u usage) plus(v usage) usage  { return usage{u.cpu + v.cpu, u.faults + v.faults} }
func (u usage) minus(v usage) usage { return usage{u.cpu - v.cpu, u.faults - v.faults} }

// descendantsUsage is the usage so far of every process descended from this
// one: the live ones, including what their own reaped children used, and
// those this process has reaped. Descendants are found by parent pid, since
// sandboxed processes run in sessions and pid namespaces of their own.
func descendantsUsage() (usage, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return usage{}, err
	}
	type stat struct {
		ppid int
		use  usage // own and reaped children's
	}
	stats := map[int]stat{}
	kids := map[int][]int{}
	var reaped usage
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command name, which is in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		if len(f) < 15 {
			continue
		}
		num := func(i int) int64 {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return v
		}
		tick := func(i int) time.Duration { return time.Duration(num(i)) * time.Second / clockTick }
		ppid, _ := strconv.Atoi(f[1])
		// minflt, cminflt (fields 10 and 12 of proc(5)); utime, stime,
		// cutime, cstime (14 to 17).
		if pid == self {
			reaped = usage{tick(13) + tick(14), num(8)}
			continue
		}
		stats[pid] = stat{ppid: ppid, use: usage{tick(11) + tick(12) + tick(13) + tick(14), num(7) + num(8)}}
		kids[ppid] = append(kids[ppid], pid)
	}
	total := reaped
	queue := kids[self]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		total = total.plus(stats[pid].use)
		queue = append(queue, kids[pid]...)
	}
	return total, nil
}

// meter measures what descendants use between start and stop.
type meter struct{ start usage }

func startMeter() (meter, error) {
	u, err := descendantsUsage()
	return meter{start: u}, err
}

// stop waits for the descendants to settle (a zygote prepares its next spare
// after handing a job over) and returns what they used since start.
func (m meter) stop() (usage, error) {
	last, err := descendantsUsage()
	if err != nil {
		return usage{}, err
	}
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		now, err := descendantsUsage()
		if err != nil {
			return usage{}, err
		}
		if now == last {
			break
		}
		last = now
	}
	return last.minus(m.start), nil
}
