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

// descendantsCPU is the CPU time (user and system) used so far by every
// process descended from this one: the live ones, including what their own
// reaped children used, and those this process has reaped. Descendants are
// found by parent pid, since sandboxed processes run in sessions and pid
// namespaces of their own.
func descendantsCPU() (time.Duration, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	type stat struct {
		ppid int
		cpu  time.Duration // own and reaped children's
	}
	stats := map[int]stat{}
	kids := map[int][]int{}
	var reaped time.Duration
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
		tick := func(i int) time.Duration {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			return time.Duration(v) * time.Second / clockTick
		}
		ppid, _ := strconv.Atoi(f[1])
		if pid == self {
			reaped = tick(13) + tick(14)
			continue
		}
		stats[pid] = stat{ppid: ppid, cpu: tick(11) + tick(12) + tick(13) + tick(14)}
		kids[ppid] = append(kids[ppid], pid)
	}
	total := reaped
	queue := kids[self]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		total += stats[pid].cpu
		queue = append(queue, kids[pid]...)
	}
	return total, nil
}

// cpuMeter measures the CPU that descendants use between start and stop.
type cpuMeter struct{ start time.Duration }

func startCPU() (cpuMeter, error) {
	d, err := descendantsCPU()
	return cpuMeter{start: d}, err
}

// stop waits for the descendants to settle (a zygote prepares its next spare
// after handing a job over) and returns the CPU used since start.
func (m cpuMeter) stop() (time.Duration, error) {
	last, err := descendantsCPU()
	if err != nil {
		return 0, err
	}
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		now, err := descendantsCPU()
		if err != nil {
			return 0, err
		}
		if now == last {
			break
		}
		last = now
	}
	return last - m.start, nil
}
