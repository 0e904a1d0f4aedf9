package execution

import "time"

// tickLayout writes a schedule's tick in the id of the execution it starts.
const tickLayout = "20060102T150405Z"

// TickID is the id of the execution schedule id of workflow wf starts for
// its tick at t: <workflow>-<schedule id>-<tick, UTC, 20060102T150405Z>.
// However many engine replicas see a tick, or however often it is
// delivered, it names one execution.
func TickID(wf, id string, t time.Time) string {
	return TickPrefix(wf, id) + t.UTC().Format(tickLayout)
}

// TickPrefix begins the id of every execution schedule id of workflow wf
// starts.
func TickPrefix(wf, id string) string { return wf + "-" + id + "-" }

// ParseTick reads the tick back from the rest of a TickID after its
// TickPrefix.
func ParseTick(s string) (time.Time, error) { return time.Parse(tickLayout, s) }
