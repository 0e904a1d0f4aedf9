package loadgen

import (
	"slices"
	"testing"
	"time"
)

func TestCheckTicks(t *testing.T) {
	anchor := time.Date(2026, 12, 7, 10, 0, 1, 0, time.UTC)
	every := 2 * time.Second
	at := func(k int) time.Time { return anchor.Add(time.Duration(k) * every) }
	// Ticks 1..12; killed after 4 fell due, down while 5, 6 and 7 fell due,
	// taking ticks again before 8; settled from 9 on.
	k := Around{Killed: at(4).Add(1500 * time.Millisecond), Restarted: at(7).Add(500 * time.Millisecond), Ready: at(7).Add(900 * time.Millisecond)}
	until := at(12).Add(time.Second)
	ticks := func(ks ...int) []time.Time {
		var out []time.Time
		for _, k := range ks {
			out = append(out, at(k))
		}
		return out
	}
	for _, tc := range []struct {
		name, catchup string
		runs          []int
		lost, twice   []int
		extra         []int
		offGrid       bool
	}{
		{name: "all, each once", catchup: "all", runs: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{name: "all, a missed tick lost", catchup: "all", runs: []int{1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12}, lost: []int{6}},
		{name: "the tick before the kill lost", catchup: "latest", runs: []int{1, 2, 3, 7, 8, 9, 10, 11, 12}, lost: []int{4}},
		{name: "latest, the last missed", catchup: "latest", runs: []int{1, 2, 3, 4, 7, 8, 9, 10, 11, 12}},
		{name: "latest, an earlier missed", catchup: "latest", runs: []int{1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12}, extra: []int{5}},
		{name: "latest, none of them", catchup: "latest", runs: []int{1, 2, 3, 4, 9, 10, 11, 12}, lost: []int{7}},
		{name: "none", catchup: "none", runs: []int{1, 2, 3, 4, 9, 10, 11, 12}},
		{name: "none, a missed tick ran", catchup: "none", runs: []int{1, 2, 3, 4, 6, 9, 10, 11, 12}, extra: []int{6}},
		{name: "twice", catchup: "none", runs: []int{1, 2, 3, 4, 4, 9, 10, 11, 12}, twice: []int{4}},
		{name: "after the restart lost", catchup: "none", runs: []int{1, 2, 3, 4, 9, 11, 12}, lost: []int{10}},
		{name: "off the grid", catchup: "none", runs: []int{1, 2, 3, 4, 9, 10, 11, 12}, offGrid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := ticks(tc.runs...)
			if tc.offGrid {
				runs = append(runs, at(10).Add(time.Second))
			}
			c := CheckTicks(runs, anchor, every, tc.catchup, k, until)
			if c.Ticks != 12 {
				t.Errorf("%d ticks, want 12", c.Ticks)
			}
			if !slices.Equal(c.Lost, ticks(tc.lost...)) || !slices.Equal(c.Twice, ticks(tc.twice...)) ||
				!slices.Equal(c.Extra, ticks(tc.extra...)) || (len(c.OffGrid) > 0) != tc.offGrid {
				t.Errorf("lost %v twice %v extra %v off %v; want %v %v %v off %v", c.Lost, c.Twice, c.Extra, c.OffGrid, tc.lost, tc.twice, tc.extra, tc.offGrid)
			}
			if c.OK() != (len(tc.lost)+len(tc.twice)+len(tc.extra) == 0 && !tc.offGrid) {
				t.Errorf("OK %v", c.OK())
			}
		})
	}
}
