// Package flow is the graph engine's execution state machine, and it is
// pure: a Transition takes an execution's state and one event (a start, an
// agent's result, a timer, a signal, a cancel, a child execution's end) and
// gives the next state, the commands and events to publish (Out), and the
// effects for the shell to apply: code cache writes (CacheFx), day-counter
// shares to hold and release (BudgetFx), timers to drop (TimersFx), and map
// items' results to keep and to purge (ResultsFx, PurgeFx). It makes no
// JetStream call: its only reads are through hooks the shell binds (the
// code cache's Lookup and Semantic, the value store's Expand and ReadValue,
// a map's kept MapResults), so the same state, event and reads give the
// same state and events, with the same ids. What it keeps between
// transitions is read-only memory of text it was given: a map's list split
// into items (ItemLists) and large contexts split into members (Contexts),
// both by what they were read from.
//
// Package engine is the shell around it: it reads and stores the state with
// compare-and-set, binds the hooks, applies the effects and publishes what
// the transition decided. Each node kind is a file of its own here
// (kind_*.go), behind one registry (kinds.go).
package flow
