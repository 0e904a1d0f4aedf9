package bus

import "github.com/novaflow/nova/pkg/bus/busname"

// The names of the bus are package busname's, which imports no NATS
// client; they are repeated here for bus's callers.
const (
	StreamCommands            = busname.StreamCommands
	StreamEvents              = busname.StreamEvents
	StreamDeadLetters         = busname.StreamDeadLetters
	StreamTimers              = busname.StreamTimers
	TypeWorkflowStart         = busname.TypeWorkflowStart
	TypeWorkflowRegister      = busname.TypeWorkflowRegister
	TypeWorkflowStarted       = busname.TypeWorkflowStarted
	TypeWorkflowCompleted     = busname.TypeWorkflowCompleted
	TypeSandboxExecute        = busname.TypeSandboxExecute
	TypeSandboxExecuted       = busname.TypeSandboxExecuted
	TypeNodeStarted           = busname.TypeNodeStarted
	TypeNodeCompleted         = busname.TypeNodeCompleted
	TypeStepCompleted         = busname.TypeStepCompleted
	TypeDeadLetter            = busname.TypeDeadLetter
	TypeExecutionCancel       = busname.TypeExecutionCancel
	TypeExecutionCancelled    = busname.TypeExecutionCancelled
	TypeExecutionStopped      = busname.TypeExecutionStopped
	TypeStepsCancelled        = busname.TypeStepsCancelled
	TypeLockAcquire           = busname.TypeLockAcquire
	TypeLockRelease           = busname.TypeLockRelease
	TypeLockGranted           = busname.TypeLockGranted
	TypeExecutionSignal       = busname.TypeExecutionSignal
	TypeSignalRejected        = busname.TypeSignalRejected
	TypeSignalKept            = busname.TypeSignalKept
	TypeNodeWaiting           = busname.TypeNodeWaiting
	TypeTimerFired            = busname.TypeTimerFired
	TypeScheduleTick          = busname.TypeScheduleTick
	TypeSchedulePut           = busname.TypeSchedulePut
	TypeScheduleDelete        = busname.TypeScheduleDelete
	TypeChildCompleted        = busname.TypeChildCompleted
	TypeRefinementStart       = busname.TypeRefinementStart
	TypeRefinementProgress    = busname.TypeRefinementProgress
	TypeInputAnalyze          = busname.TypeInputAnalyze
	TypeInputAnalyzed         = busname.TypeInputAnalyzed
	TypeCodeGenerate          = busname.TypeCodeGenerate
	TypeCodeGenerated         = busname.TypeCodeGenerated
	TypeCodeValidate          = busname.TypeCodeValidate
	TypeCodeValidated         = busname.TypeCodeValidated
	TypeOutputValidate        = busname.TypeOutputValidate
	TypeOutputValidated       = busname.TypeOutputValidated
	AgentGraphEngine          = busname.AgentGraphEngine
	AgentSandbox              = busname.AgentSandbox
	AgentInputAnalyzer        = busname.AgentInputAnalyzer
	AgentCodeGenerator        = busname.AgentCodeGenerator
	AgentCodeValidator        = busname.AgentCodeValidator
	AgentOutputValidator      = busname.AgentOutputValidator
	KindWorkflowStarted       = busname.KindWorkflowStarted
	KindWorkflowCompleted     = busname.KindWorkflowCompleted
	KindNodeStarted           = busname.KindNodeStarted
	KindNodeCompleted         = busname.KindNodeCompleted
	KindStepCompleted         = busname.KindStepCompleted
	KindSandboxResult         = busname.KindSandboxResult
	KindRefinement            = busname.KindRefinement
	KindNodeWaiting           = busname.KindNodeWaiting
	KindExecutionCancelled    = busname.KindExecutionCancelled
	KindExecutionStopped      = busname.KindExecutionStopped
	KindStepsCancelled        = busname.KindStepsCancelled
	KindSignalRejected        = busname.KindSignalRejected
	KindSignalKept            = busname.KindSignalKept
	KindChildCompleted        = busname.KindChildCompleted
	KindEvents                = busname.KindEvents
	KindEventsStart           = busname.KindEventsStart
	KindEventsRun             = busname.KindEventsRun
	TimerFiredFilter          = busname.TimerFiredFilter
	ScheduleTickFilter        = busname.ScheduleTickFilter
	ExtensionExecutionID      = busname.ExtensionExecutionID
	BucketExecutions          = busname.BucketExecutions
	BucketWorkflows           = busname.BucketWorkflows
	BucketSchedules           = busname.BucketSchedules
	BucketLocks               = busname.BucketLocks
	BucketMapResults          = busname.BucketMapResults
	BucketSandboxResults      = busname.BucketSandboxResults
	ConsumerEngineCommands    = busname.ConsumerEngineCommands
	ConsumerEngineResults     = busname.ConsumerEngineResults
	ConsumerEngineDeadLetters = busname.ConsumerEngineDeadLetters
	ConsumerEngineTimers      = busname.ConsumerEngineTimers
	ConsumerEngineSchedules   = busname.ConsumerEngineSchedules
)

// ResultKind is busname.ResultKind.
func ResultKind(agent string) string { return busname.ResultKind(agent) }

// ReplyKind is busname.ReplyKind.
func ReplyKind(agent string) string { return busname.ReplyKind(agent) }

// ResultSubject is busname.ResultSubject.
func ResultSubject(executionID, agent, replyKind string) (string, error) {
	return busname.ResultSubject(executionID, agent, replyKind)
}

// TimerSubject is busname.TimerSubject.
func TimerSubject(executionID, timerID string) string {
	return busname.TimerSubject(executionID, timerID)
}

// TimerFiredSubject is busname.TimerFiredSubject.
func TimerFiredSubject(executionID, timerID string) string {
	return busname.TimerFiredSubject(executionID, timerID)
}

// ScheduleSubject is busname.ScheduleSubject.
func ScheduleSubject(workflow, scheduleID string) string {
	return busname.ScheduleSubject(workflow, scheduleID)
}

// ScheduleTickSubject is busname.ScheduleTickSubject.
func ScheduleTickSubject(workflow, scheduleID string) string {
	return busname.ScheduleTickSubject(workflow, scheduleID)
}

// ScheduleKey is busname.ScheduleKey.
func ScheduleKey(wf, id string) string { return busname.ScheduleKey(wf, id) }

// CommandSubject is busname.CommandSubject.
func CommandSubject(agent string) string { return busname.CommandSubject(agent) }

// EventSubject is busname.EventSubject.
func EventSubject(executionID, kind string) string { return busname.EventSubject(executionID, kind) }

// EventFilter is busname.EventFilter.
func EventFilter(kind string) string { return busname.EventFilter(kind) }

// ExecutionFilter is busname.ExecutionFilter.
func ExecutionFilter(executionID string) string { return busname.ExecutionFilter(executionID) }

// EventKind is busname.EventKind.
func EventKind(executionID, subject string) string { return busname.EventKind(executionID, subject) }

// ParseEventSubject is busname.ParseEventSubject.
func ParseEventSubject(subject string) (execution, kind string, ok bool) {
	return busname.ParseEventSubject(subject)
}

// IsReplyKind is busname.IsReplyKind.
func IsReplyKind(kind string) bool { return busname.IsReplyKind(kind) }

// DeadLetterSubject is busname.DeadLetterSubject.
func DeadLetterSubject(consumer string) string { return busname.DeadLetterSubject(consumer) }

// subjectToken is busname.Token.
func subjectToken(s string) string { return busname.Token(s) }
