// Package busname is what NOVA's bus calls things: its streams, the
// subjects of commands, events, timers and schedules, the CloudEvents types
// and event kinds, the agents, and the graph engine's buckets and
// consumers. It holds names only, no NATS client, so that code that decides
// what to publish without publishing it (the graph engine's state machine)
// can name it; package bus repeats each name for its callers.
package busname

import (
	"fmt"
	"strings"
)

// Streams declared by EnsureStreams.
const (
	// StreamCommands holds work for the agents: one subject per agent,
	// work-queue retention, one durable consumer per agent shared by all its replicas.
	StreamCommands = "NOVA_CMD"
	// StreamEvents holds results and facts of executions: nova.evt.<execution>.<kind>.
	StreamEvents = "NOVA_EVT"
	// StreamDeadLetters holds events that could not be handled: nova.dlq.<consumer>.
	StreamDeadLetters = "NOVA_DLQ"
	// StreamTimers holds durable timers as JetStream message schedules
	// (nova.timer.set.<execution>.<timer>, and the schedules of workflows on
	// nova.schedule.set.<workflow>.<schedule>) and what they publish when
	// they come due (nova.timer.fired.>, nova.schedule.tick.>), work-queue
	// retention: a fired timer is gone once the engine took it.
	StreamTimers = "NOVA_TIMERS"
)

// Event types (CloudEvents "type"), reverse-DNS and versioned.
const (
	TypeWorkflowStart     = "io.nova.workflow.start.v1"
	TypeWorkflowRegister  = "io.nova.workflow.register.v1"
	TypeWorkflowStarted   = "io.nova.workflow.started.v1"
	TypeWorkflowCompleted = "io.nova.workflow.completed.v1"
	TypeSandboxExecute    = "io.nova.sandbox.execute.v1"
	TypeSandboxExecuted   = "io.nova.sandbox.executed.v1"
	TypeNodeStarted       = "io.nova.node.started.v1"
	TypeNodeCompleted     = "io.nova.node.completed.v1"
	TypeStepCompleted     = "io.nova.node.step.completed.v1"
	TypeDeadLetter        = "io.nova.deadletter.v1"

	TypeExecutionCancel    = "io.nova.execution.cancel.v1"
	TypeExecutionCancelled = "io.nova.execution.cancelled.v1"
	TypeExecutionStopped   = "io.nova.execution.stopped.v1"
	TypeStepsCancelled     = "io.nova.steps.cancelled.v1"
	TypeLockAcquire        = "io.nova.lock.acquire.v1"
	TypeLockRelease        = "io.nova.lock.release.v1"
	TypeLockGranted        = "io.nova.lock.granted.v1"
	TypeExecutionSignal    = "io.nova.execution.signal.v1"
	TypeSignalRejected     = "io.nova.execution.signal.rejected.v1"
	TypeSignalKept         = "io.nova.execution.signal.kept.v1"
	TypeNodeWaiting        = "io.nova.node.waiting.v1"
	TypeTimerFired         = "io.nova.timer.fired.v1"
	TypeScheduleTick       = "io.nova.schedule.tick.v1"
	TypeSchedulePut        = "io.nova.schedule.put.v1"
	TypeScheduleDelete     = "io.nova.schedule.delete.v1"
	// A sub-workflow's child execution ended (ChildCompleted), for its
	// parent.
	TypeChildCompleted = "io.nova.workflow.child.completed.v1"

	TypeRefinementStart    = "io.nova.refinement.start.v1"
	TypeRefinementProgress = "io.nova.refinement.progress.v1"

	TypeInputAnalyze    = "io.nova.agent.input.analyze.v1"
	TypeInputAnalyzed   = "io.nova.agent.input.analyzed.v1"
	TypeCodeGenerate    = "io.nova.agent.code.generate.v1"
	TypeCodeGenerated   = "io.nova.agent.code.generated.v1"
	TypeCodeValidate    = "io.nova.agent.code.validate.v1"
	TypeCodeValidated   = "io.nova.agent.code.validated.v1"
	TypeOutputValidate  = "io.nova.agent.output.validate.v1"
	TypeOutputValidated = "io.nova.agent.output.validated.v1"
)

// Agent names: each owns the command subject nova.cmd.<agent>.
const (
	AgentGraphEngine     = "graph-engine"
	AgentSandbox         = "sandbox"
	AgentInputAnalyzer   = "input-analyzer"
	AgentCodeGenerator   = "code-generator"
	AgentCodeValidator   = "code-validator"
	AgentOutputValidator = "output-validator"
)

// ResultKind is the event kind of an agent's results:
// nova.evt.<execution>.result.<agent>.
func ResultKind(agent string) string { return "result." + agent }

// ReplyKind is the event kind of an agent's results for a run outside any
// workflow (the gateway's POST /v1/execute): nova.evt.<id>.reply.<agent>,
// which the graph engine does not consume.
func ReplyKind(agent string) string { return replyPrefix + agent }

const replyPrefix = "reply."

// ResultSubject is where an agent answers a command: the kind the command
// names (reply_kind), else result.<agent>. A kind that is not reply.<name>
// is refused, so a command cannot make an agent forge another kind of
// event.
func ResultSubject(executionID, agent, replyKind string) (string, error) {
	if replyKind == "" {
		return EventSubject(executionID, ResultKind(agent)), nil
	}
	name, ok := strings.CutPrefix(replyKind, replyPrefix)
	if !ok || name == "" || Token(name) != name {
		return "", fmt.Errorf("reply_kind %q is not %s<name> (one subject token)", replyKind, replyPrefix)
	}
	return EventSubject(executionID, replyKind), nil
}

// Event kinds: the tail of nova.evt.<execution>.<kind>.
const (
	KindWorkflowStarted   = "workflow.started"
	KindWorkflowCompleted = "workflow.completed"
	KindNodeStarted       = "node.started"
	KindNodeCompleted     = "node.completed"
	KindStepCompleted     = "step.completed"
	KindSandboxResult     = "result.sandbox"
	// KindRefinement carries a refinement's messages (RefinementProgress).
	KindRefinement         = "refinement"
	KindNodeWaiting        = "node.waiting"
	KindExecutionCancelled = "execution.cancelled"
	// KindExecutionStopped: the execution ended while some of its lines
	// still ran work, which is to stop as for a cancel.
	KindExecutionStopped = "execution.stopped"
	// KindStepsCancelled: some steps' work is to stop while the execution
	// runs on (its lines were cancelled).
	KindStepsCancelled = "steps.cancelled"
	KindSignalRejected = "signal.rejected"
	KindSignalKept     = "signal.kept"
	// KindChildCompleted is the graph engine's result for a parent
	// execution: one of its child executions ended.
	KindChildCompleted = "result." + AgentGraphEngine
	// KindEvents begins the kind of an envelope (events.start, events.run):
	// the events of enveloped kinds (Enveloped) that one transition of an
	// execution publishes, in one message.
	KindEvents = "events"
	// KindEventsStart is the kind of an envelope that holds a workflow's
	// start (one start per envelope), KindEventsRun that of the others.
	KindEventsStart = KindEvents + ".start"
	KindEventsRun   = KindEvents + ".run"
)

// envelopedTypes are the types of the events that travel in envelopes, by
// kind: those every transition of a workflow publishes. The rarer kinds,
// and a workflow's completion (what waits and retention look up by
// subject), travel alone.
var envelopedTypes = map[string]string{
	KindWorkflowStarted: TypeWorkflowStarted,
	KindNodeStarted:     TypeNodeStarted,
	KindNodeCompleted:   TypeNodeCompleted,
	KindStepCompleted:   TypeStepCompleted,
}

// Enveloped tells whether events of kind travel in envelopes
// (nova.evt.<execution>.events) when their transition publishes more than
// one.
func Enveloped(kind string) bool {
	_, ok := envelopedTypes[kind]
	return ok
}

// EnvelopedKind is the kind of an event of type typ that an envelope
// carries; false for a type that does not travel in one.
func EnvelopedKind(typ string) (string, bool) {
	for kind, t := range envelopedTypes {
		if t == typ {
			return kind, true
		}
	}
	return "", false
}

// TimerSubject is where the schedule of an execution's durable timer is
// kept; TimerFiredSubject is where it publishes when it comes due, which
// the graph engine consumes (TimerFiredFilter).
func TimerSubject(executionID, timerID string) string {
	return "nova.timer.set." + Token(executionID) + "." + Token(timerID)
}

// TimerFiredSubject: see TimerSubject.
func TimerFiredSubject(executionID, timerID string) string {
	return "nova.timer.fired." + Token(executionID) + "." + Token(timerID)
}

// TimerFiredFilter matches every fired timer.
const TimerFiredFilter = "nova.timer.fired.>"

// ScheduleSubject is where the message schedule of a workflow's schedule
// is kept; ScheduleTickSubject is where each of its ticks is published,
// which the graph engine consumes (ScheduleTickFilter).
func ScheduleSubject(workflow, scheduleID string) string {
	return "nova.schedule.set." + Token(workflow) + "." + Token(scheduleID)
}

// ScheduleTickSubject: see ScheduleSubject.
func ScheduleTickSubject(workflow, scheduleID string) string {
	return "nova.schedule.tick." + Token(workflow) + "." + Token(scheduleID)
}

// ScheduleTickFilter matches every schedule's ticks.
const ScheduleTickFilter = "nova.schedule.tick.>"

// ExtensionExecutionID is the CloudEvents extension naming the execution an
// event belongs to. Producers set it on start commands, so that even a start
// whose data cannot be read ends in a completion event; every event of an
// execution carries it.
const ExtensionExecutionID = "executionid"

// KV buckets the graph engine owns, read by the gateway, the CLI and the
// producer library.
const (
	// BucketExecutions holds each execution's state (ExecutionState) under
	// its id.
	BucketExecutions = "nova_executions"
	// BucketWorkflows holds registered definitions under their names.
	BucketWorkflows = "nova_workflows"
	// BucketSchedules holds each schedule (ScheduleState) under
	// ScheduleKey.
	BucketSchedules = "nova_schedules"
	// BucketLocks holds each lock of Node.lock (LockState) under its name.
	BucketLocks = "nova_locks"
	// BucketMapResults holds the results of a running map's finished
	// items under <execution>.<node, base64url>.<visit>.<index>.
	BucketMapResults = "nova_map_results"
	// BucketSandboxResults holds a program's result whose publish failed,
	// under <execution>.<step, base64url>: the command's next delivery
	// publishes it instead of running the program again.
	BucketSandboxResults = "nova_sandbox_results"
)

// ScheduleKey is the key of schedule id of workflow wf in
// BucketSchedules: <workflow>.<schedule id>.
func ScheduleKey(wf, id string) string { return wf + "." + id }

// Durable consumers of the graph engine.
const (
	ConsumerEngineCommands    = "graph-engine"
	ConsumerEngineResults     = "graph-engine-results"
	ConsumerEngineDeadLetters = "graph-engine-dead-letters"
	ConsumerEngineTimers      = "graph-engine-timers"
	ConsumerEngineSchedules   = "graph-engine-schedules"
)

// CommandSubject is the work-queue subject of an agent.
func CommandSubject(agent string) string { return "nova.cmd." + agent }

// EventSubject is the subject of a fact about one execution.
func EventSubject(executionID, kind string) string {
	return "nova.evt." + Token(executionID) + "." + kind
}

// EventFilter matches one kind of event for every execution, e.g. for the
// engine's durable consumer of results.
func EventFilter(kind string) string { return "nova.evt.*." + kind }

// ExecutionFilter matches every event of one execution (for SSE and waiting clients).
func ExecutionFilter(executionID string) string {
	return "nova.evt." + Token(executionID) + ".>"
}

// EventKind is the kind of an event of execution executionID from its
// subject (the tail of nova.evt.<execution>.<kind>); "" for another
// execution's subject.
func EventKind(executionID, subject string) string {
	execution, kind, ok := ParseEventSubject(subject)
	if !ok || execution != Token(executionID) {
		return ""
	}
	return kind
}

// ParseEventSubject splits nova.evt.<execution>.<kind> into the
// execution's subject token and the kind; ok is false for another subject.
func ParseEventSubject(subject string) (execution, kind string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "nova.evt.")
	if !ok {
		return "", "", false
	}
	execution, kind, ok = strings.Cut(rest, ".")
	if !ok || execution == "" || kind == "" {
		return "", "", false
	}
	return execution, kind, true
}

// IsReplyKind tells whether kind is an agent's reply to a run outside any
// workflow (ReplyKind).
func IsReplyKind(kind string) bool { return strings.HasPrefix(kind, replyPrefix) }

// DeadLetterSubject is where a consumer's undeliverable events go.
func DeadLetterSubject(consumer string) string { return "nova.dlq." + Token(consumer) }

// Token keeps an id a single subject token: NATS separates tokens with
// dots and reserves * and >, and ids come from producers.
func Token(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}
