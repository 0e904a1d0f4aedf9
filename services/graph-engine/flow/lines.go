package flow

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Lines of control. Every running execution holds its lines in
// ExecutionState.branches, each a record with its own node, pending step,
// timer, context and place in the forks it descends from: one line (id "")
// until the execution forks, then one per branch and map item. The
// transition works on one line at a time (t.ln), found by what the event
// names (its step, its timer, the signal it waits for); nothing is copied
// in or out of the execution's own fields.
//
// Forks are named ("<node>@<sequence>") and every line keeps the forks it
// descends from, each with what its ancestor changed before it (a KeyList),
// so that where lines meet (a join, or the end of the execution) each key
// takes the latest write on the paths that reach it (mergeLines).
//
// A join collects its arrivals in activations: one per fork it closes, so
// that a late line of an earlier loop round never counts for a later one.
// An activation of wait: all goes on when no line of its fork can still
// reach the join (dead-path elimination); wait: any or a number goes on
// with the first arrivals, and the lines of its fork that could still
// reach the join end there when they arrive (absorbed_at). An execution
// whose joins wait only for lines parked at each other fails at once.

// MarshalState is st as the executions bucket stores it. The context of an
// execution whose first line holds the execution's context (one line, or
// one at a map with its items) is stored once, in the state, and the line
// gets it back as it is read (upgradeState); so is a line's node input
// that is its context.
func MarshalState(st *novav1.ExecutionState) ([]byte, error) {
	for _, l := range st.Branches {
		if l.NodeInput != nil && l.NodeInput == l.Context {
			// The input of the node the line is at is still its context
			// (a map waiting for its items): stored once.
			l.NodeInput, l.InputIsContext = nil, true
			defer func() { l.NodeInput, l.InputIsContext = l.Context, false }()
		}
	}
	for _, l := range st.Branches {
		if l.Id == "" && l.Context == st.Context && st.Context != nil {
			// The execution's first line, its context the execution's
			// (one line, or one line at a map with its items).
			l.Context = nil
			defer func() { l.Context = st.Context }()
			break
		}
	}
	return proto.Marshal(st)
}

// StartLine makes the execution's one line, with its context, and makes it
// the line the transition works on.
func (t *Transition) StartLine() {
	l := &novav1.Branch{Context: t.st.Context}
	t.st.Branches = append(t.st.Branches, l)
	t.bind(l)
	t.changed = true
}

// bind makes l the line the transition works on.
func (t *Transition) bind(l *novav1.Branch) {
	t.ln = l
	t.ctx = t.cfg.Contexts.object(l.Context)
	if l.Context == nil {
		l.Context = t.ctx.Proto()
	}
	// What a line changes is told from its context as the work began; the
	// execution's one line has nothing to tell it from.
	t.lineStart = nil
	if l.Id != "" && !l.IsItem {
		t.lineStart = t.ctx.Clone()
	}
}

// on runs fn on line l, then goes back to the line the transition was on.
func (t *Transition) on(l *novav1.Branch, fn func()) {
	ln, ctx, start := t.ln, t.ctx, t.lineStart
	t.bind(l)
	fn()
	t.KeepChanges()
	t.ln, t.ctx, t.lineStart = ln, ctx, start
}

// KeepChanges records in the transition's line the keys it changed since
// the fork it descends from.
func (t *Transition) KeepChanges() {
	if t.lineStart != nil && t.live(t.ln) {
		t.ln.ChangedKeys = t.lineChanges()
	}
}

// live tells whether l is one of the execution's lines.
func (t *Transition) live(l *novav1.Branch) bool {
	return slices.Contains(t.st.Branches, l)
}

// newLine adds l to the execution's lines with an id of its own.
func (t *Transition) newLine(l *novav1.Branch) *novav1.Branch {
	t.st.BranchSeq++
	l.Id = fmt.Sprintf("b%d", t.st.BranchSeq)
	t.st.Branches = append(t.st.Branches, l)
	t.changed = true
	return l
}

// endLine drops l from the execution's lines.
func (t *Transition) endLine(l *novav1.Branch) {
	t.st.Branches = slices.DeleteFunc(t.st.Branches, func(x *novav1.Branch) bool { return x == l })
	t.changed = true
}

func (t *Transition) line(id string) *novav1.Branch {
	for _, l := range t.st.Branches {
		if l.Id == id {
			return l
		}
	}
	return nil
}

// OnLine applies fn to the line match finds. With none, fn sees a line of
// its own that is at no node (and tells a stale or early event so).
func (t *Transition) OnLine(match func(*novav1.Branch) bool, fn func() error) error {
	var err error
	for _, l := range t.st.Branches {
		if match(l) {
			t.on(l, func() { err = fn() })
			return err
		}
	}
	t.on(&novav1.Branch{Context: t.st.Context}, func() { err = fn() })
	return err
}

// OnStep is OnLine for the result of step: the line waiting for it.
func (t *Transition) OnStep(step string, fn func() error) error {
	return t.OnLine(func(b *novav1.Branch) bool { return b.PendingStepId == step }, fn)
}

// lineChanges are the context keys the transition's line set or deleted
// since the fork it descends from.
func (t *Transition) lineChanges() []string {
	if t.lineStart == nil {
		return t.ln.GetChangedKeys()
	}
	keys := slices.Clone(t.ln.GetChangedKeys())
	for k, raw := range t.ctx {
		if old, ok := t.lineStart[k]; !ok || !bytes.Equal(old, raw) {
			keys = append(keys, k)
		}
	}
	for k := range t.lineStart {
		if _, ok := t.ctx[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// follow goes on from node to targets: the one next node, or a line for
// each of several.
func (t *Transition) follow(from *novav1.Node, targets []string) {
	if len(targets) == 1 {
		t.Enter(targets[0])
		return
	}
	t.fork(from, targets)
}

// fork ends the transition's line and starts one for each target, each
// with a copy of its context and the fork added to its history. Every new
// line exists before any of them moves, so that one reaching an end node
// at once sees the others.
func (t *Transition) fork(from *novav1.Node, targets []string) {
	parent := t.ln
	fork := &novav1.KeyList{Fork: fmt.Sprintf("%s@%d", from.Id, t.st.Sequence), Node: from.Id, Keys: t.lineChanges()}
	history := append(slices.Clone(parent.ForkChanges), fork)
	t.endLine(parent)
	lines := make([]*novav1.Branch, len(targets))
	for i := range targets {
		lines[i] = t.newLine(&novav1.Branch{Context: parent.Context, ForkChanges: history, FromNode: from.Id,
			AbsorbedAt: slices.Clone(parent.AbsorbedAt)})
	}
	for i, to := range targets {
		if t.st.Status != statusRunning {
			return
		}
		t.on(lines[i], func() { t.Enter(to) })
	}
}

// lineEnded ends the transition's line at an end node. The last line ends
// the execution; one that ends while others run is kept (st.ended) and its
// context merged with theirs when the execution ends.
func (t *Transition) lineEnded() {
	l := t.ln
	t.KeepChanges()
	t.endLine(l)
	if len(t.st.Branches) == 0 && len(t.st.Joins) == 0 && len(t.st.Ended) == 0 {
		t.st.Context = l.Context
		t.complete()
		return
	}
	t.st.Ended = append(t.st.Ended, &novav1.Branch{Id: l.Id, Context: l.Context, ChangedKeys: l.ChangedKeys,
		ForkChanges: l.ForkChanges, FromNode: cmp.Or(t.prevNode, l.FromNode)})
}

// Settle does what follows from the lines' moves: maps start their next
// items or finish, joins whose lines all came go on, and the execution ends
// when no line is left (merging what the lines that ended changed) or fails
// when its joins wait only for each other.
func (t *Transition) Settle() {
	if t.st.Status != statusRunning {
		return
	}
	if one := t.soleLine(); one != nil && len(t.st.Branches) == 1 && one.MapRun == nil {
		// One line, at no map: nothing to settle; the execution's context
		// is its.
		t.st.Context = one.Context
		return
	}
	for range 100000 {
		if t.st.Status != statusRunning || !t.settleOnce() {
			break
		}
	}
	if t.st.Status != statusRunning {
		return
	}
	if stuck := t.stuckJoins(); stuck != "" {
		t.bindAny()
		t.Fail(stuck)
		return
	}
	if len(t.st.Branches) == 0 && len(t.st.Joins) == 0 {
		t.finishEnded()
		return
	}
	if one := t.soleLine(); one != nil {
		t.st.Context = one.Context
	}
}

// soleLine is the execution's one line besides its map items (whose
// context is the execution's), nil when it runs several, has lines parked
// at a join or ended, or none.
func (t *Transition) soleLine() *novav1.Branch {
	if len(t.st.Joins) > 0 || len(t.st.Ended) > 0 {
		return nil
	}
	var one *novav1.Branch
	for _, l := range t.st.Branches {
		if l.IsItem {
			continue
		}
		if one != nil {
			return nil
		}
		one = l
	}
	return one
}

// bindAny makes sure the transition works on a line: its own, else the
// first the execution has, else one at no node.
func (t *Transition) bindAny() {
	if t.ln != nil {
		return
	}
	if len(t.st.Branches) > 0 {
		t.bind(t.st.Branches[0])
		return
	}
	t.bind(&novav1.Branch{Context: t.st.Context})
}

// finishEnded ends an execution whose lines all ended at end nodes: their
// contexts merged are its final context.
func (t *Transition) finishEnded() {
	ended := t.st.Ended
	t.st.Ended = nil
	t.changed = true
	if len(ended) == 0 {
		t.complete()
		return
	}
	merged, _, _, err := mergeLines(workflow.MergeError, ended)
	var conflict *mergeConflict
	if errors.As(err, &conflict) {
		t.Fail(fmt.Sprintf("branches %s (from node %q) and %s (from node %q) ended at end nodes having both changed context key %q",
			conflict.a.Id, conflict.a.FromNode, conflict.b.Id, conflict.b.FromNode, conflict.key))
		return
	}
	// Keys that branches ended with before lines were records are in the
	// context already.
	base := jsonvalue.OwnObject(t.st.Context)
	for _, k := range t.st.EndedKeys {
		if raw, ok := base[k]; ok && !changedBy(ended, k) {
			merged[k] = raw
		}
	}
	t.st.EndedKeys = nil
	t.st.Context = merged.Proto()
	t.complete()
}

func changedBy(lines []*novav1.Branch, k string) bool {
	for _, l := range lines {
		if writeDepth(l, k) >= 0 {
			return true
		}
	}
	return false
}

// settleOnce makes one move of settle; it reports whether it made one.
func (t *Transition) settleOnce() bool {
	for _, b := range slices.Clone(t.st.Branches) {
		if b.MapRun != nil && t.live(b) && t.moveMap(b) {
			return true
		}
	}
	ids := make([]string, 0, len(t.st.Joins))
	for id := range t.st.Joins {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if t.tryJoin(id, t.st.Joins[id]) {
			return true
		}
	}
	return false
}

// mergeConflict is a key two lines changed to different values, neither
// write after the other.
type mergeConflict struct {
	a, b *novav1.Branch
	key  string
}

func (c *mergeConflict) Error() string {
	return fmt.Sprintf("branches %s (from node %q) and %s (from node %q) both changed context key %q; "+
		"give the join merge: last or merge: list to allow it", c.a.Id, c.a.FromNode, c.b.Id, c.b.FromNode, c.key)
}

// writeDepth is where in l's history key k was last written: the index of
// the fork whose preceding stretch wrote it, len(l.ForkChanges) for a write
// since its last fork, -1 for none that l knows of.
func writeDepth(l *novav1.Branch, k string) int {
	if slices.Contains(l.ChangedKeys, k) {
		return len(l.ForkChanges)
	}
	for j := len(l.ForkChanges) - 1; j >= 0; j-- {
		if slices.Contains(l.ForkChanges[j].Keys, k) {
			return j
		}
	}
	return -1
}

// commonForks is how many forks, from the outermost, a and b both descend
// from.
func commonForks(a, b *novav1.Branch) int {
	n := 0
	for n < len(a.ForkChanges) && n < len(b.ForkChanges) && a.ForkChanges[n].Fork == b.ForkChanges[n].Fork {
		n++
	}
	return n
}

// mergeLines merges the contexts of lines that met (at a join, or at the
// end of the execution), by causality: for each key, a line's value is
// overtaken when it wrote it before it parted from another line that wrote
// it since (changes inherited at an inner fork count as that branch's). The
// values no other overtakes must agree, else merge (the join's rule) says
// what the key becomes: "last" the value of the line that arrived last,
// "list" a list of them in arrival order; otherwise the merge fails naming
// the key and two lines. branch_decision stays with each line.
//
// It also returns the merged line's history (the forks every line descends
// from, less the innermost, which the meeting closes) and the keys changed
// since the last of them.
func mergeLines(merge string, lines []*novav1.Branch) (jsonvalue.Object, []*novav1.KeyList, []string, error) {
	out := jsonvalue.OwnObject(lines[0].Context).Clone()
	delete(out, branchDecision)
	common := len(lines[0].ForkChanges)
	for _, l := range lines[1:] {
		common = min(common, commonForks(lines[0], l))
	}
	// The lines meet where the innermost fork they all descend from is
	// closed: the merged line goes on as the line that forked there, whose
	// changes since the fork before count as its own.
	closed := max(common-1, 0)
	history := lines[0].ForkChanges[:closed]
	var keys []string
	for _, l := range lines {
		keys = append(keys, l.ChangedKeys...)
		for _, f := range l.ForkChanges[closed:] {
			keys = append(keys, f.Keys...)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	ctxs := make([]jsonvalue.Object, len(lines))
	for i, l := range lines {
		ctxs[i] = jsonvalue.OwnObject(l.Context)
	}
	var changed []string
	for _, k := range keys {
		if k == branchDecision {
			continue
		}
		depth := make([]int, len(lines))
		for i, l := range lines {
			depth[i] = writeDepth(l, k)
		}
		if slices.Max(depth) >= closed {
			changed = append(changed, k)
		}
		var winners []int
		for i := range lines {
			overtaken := false
			for j := range lines {
				if j == i {
					continue
				}
				if p := commonForks(lines[i], lines[j]); depth[i] < p && depth[j] >= p {
					overtaken = true
					break
				}
			}
			if !overtaken {
				winners = append(winners, i)
			}
		}
		same := true
		w0 := winners[0]
		for _, w := range winners[1:] {
			a, aok := ctxs[w0][k]
			b, bok := ctxs[w][k]
			same = same && aok == bok && bytes.Equal(a, b)
		}
		last := winners[len(winners)-1]
		switch {
		case same || merge == workflow.MergeLast:
			if raw, ok := ctxs[last][k]; ok {
				out[k] = raw
			} else {
				delete(out, k)
			}
		case merge == workflow.MergeList:
			var list bytes.Buffer
			list.WriteByte('[')
			for i, w := range winners {
				if i > 0 {
					list.WriteByte(',')
				}
				if raw, ok := ctxs[w][k]; ok {
					list.Write(raw)
				} else {
					list.WriteString("null")
				}
			}
			list.WriteByte(']')
			out[k] = list.Bytes()
		default:
			return nil, history, nil, &mergeConflict{a: lines[winners[0]], b: lines[winners[1]], key: k}
		}
	}
	return out, history, changed, nil
}
