package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/novaflow/nova/bench/loadgen"
)

// Schedules around a kill -9 of the whole `nova dev`, 1.5 s after a tick
// fell due: that tick runs exactly once under every catchup, the ticks that
// fell due while it was down run as each catchup says, and the ticks after
// the restart keep the schedule's phase (they fall on its grid from when it
// was made, not on one from the restart).

const killTickerWorkflow = `
name: kill-ticker
schedules:
  - {id: all, every: 2s, catchup: all, context: {n: 1}}
  - {id: latest, every: 2s, catchup: latest, context: {n: 2}}
  - {id: none, every: 2s, catchup: none, context: {n: 3}}
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["m"] = context["n"] * 2'}
  - {id: done, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: done}
`

func TestSchedulesSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nova and kills `nova dev`")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	proc, url := startNovaDev(t)
	// Down for 5 s: the next two or three ticks fall due meanwhile.
	res, err := loadgen.ScheduleKill{URL: url, Def: parse(t, killTickerWorkflow),
		Kill: proc.Kill, Restart: proc.Start, Down: 5 * time.Second}.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	k := res.Around
	t.Logf("the tick of all due %s before the kill; down %s, taking ticks %s after the restart",
		k.Killed.Sub(res.Due).Round(time.Millisecond), k.Restarted.Sub(k.Killed).Round(time.Millisecond), k.Ready.Sub(k.Restarted).Round(time.Millisecond))
	for _, f := range res.Failed {
		t.Errorf("execution %s", f)
	}
	for _, id := range []string{"all", "latest", "none"} {
		c := res.Checks[id]
		t.Logf("%s: %d of %d ticks ran", id, c.Ran, c.Ticks)
		if !c.OK() {
			t.Errorf("catchup %s: lost %v, twice %v, run against the catchup %v, off the grid %v (the tick due before the kill: %s)",
				id, times(c.Lost), times(c.Twice), times(c.Extra), times(c.OffGrid), res.Due.Format(time.TimeOnly))
		}
	}
}

func times(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format("15:04:05")
	}
	return out
}
