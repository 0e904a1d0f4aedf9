package chainstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ExecutionDoc is an executions document: one workflow run. Fields of the outcome are
// empty while the execution is running.
type ExecutionDoc struct {
	ExecutionID    string           `bson:"execution_id" json:"execution_id"`
	WorkflowName   string           `bson:"workflow_name" json:"workflow_name"`
	Status         string           `bson:"status" json:"status"`
	InitialContext map[string]any   `bson:"initial_context" json:"initial_context"`
	Definition     map[string]any   `bson:"definition" json:"definition,omitempty"`
	FinalContext   map[string]any   `bson:"final_context" json:"final_context,omitempty"`
	Path           []string         `bson:"path" json:"path,omitempty"`
	Nodes          []NodeSummaryDoc `bson:"nodes" json:"nodes,omitempty"`
	Error          string           `bson:"error" json:"error,omitempty"`
	StartedAt      *time.Time       `bson:"started_at" json:"started_at,omitempty"`
	CompletedAt    *time.Time       `bson:"completed_at" json:"completed_at,omitempty"`
	DurationMs     int64            `bson:"duration_ms" json:"duration_ms,omitempty"`
	// What the execution's model calls cost (price table) and how many.
	CostUSD    float64 `bson:"cost_usd" json:"cost_usd"`
	ModelCalls int     `bson:"model_calls" json:"model_calls"`
	// A cancelled execution: who cancelled it and why.
	CancelledBy  string `bson:"cancelled_by,omitempty" json:"cancelled_by,omitempty"`
	CancelReason string `bson:"cancel_reason,omitempty" json:"cancel_reason,omitempty"`
	// A rerun: the execution it reruns and the node it started from; the
	// reruns of this execution (set on the original when they start).
	RerunOf   string   `bson:"rerun_of,omitempty" json:"rerun_of,omitempty"`
	RerunFrom string   `bson:"rerun_from,omitempty" json:"rerun_from,omitempty"`
	Reruns    []string `bson:"reruns,omitempty" json:"reruns,omitempty"`
	// Started by a schedule: its id and the tick.
	ScheduleID  string     `bson:"schedule_id,omitempty" json:"schedule_id,omitempty"`
	ScheduledAt *time.Time `bson:"scheduled_at,omitempty" json:"scheduled_at,omitempty"`
	// A sub-workflow's child: the parent execution and its node that
	// started it.
	ParentExecutionID string `bson:"parent_execution_id,omitempty" json:"parent_execution_id,omitempty"`
	ParentNode        string `bson:"parent_node,omitempty" json:"parent_node,omitempty"`
}

// NodeSummaryDoc is one node's outcome in ExecutionDoc.Nodes.
type NodeSummaryDoc struct {
	ID       string `bson:"id" json:"id"`
	Status   string `bson:"status" json:"status"`
	Attempts int    `bson:"attempts" json:"attempts"`
	Error    string `bson:"error" json:"error,omitempty"`
	Visits   int    `bson:"visits" json:"visits"`
	// What the node's model calls cost over all its visits.
	CostUSD    float64 `bson:"cost_usd" json:"cost_usd"`
	ModelCalls int     `bson:"model_calls" json:"model_calls"`
}

// NodeDoc is a chain_of_work document: one visit of one node. Field names follow the
// original NOVA tables. Its optional fields (those JSON leaves out when empty)
// are not stored when empty, nor are they in StepDoc.
type NodeDoc struct {
	ID             string         `bson:"_id" json:"id"`
	ExecutionID    string         `bson:"execution_id" json:"execution_id"`
	NodeID         string         `bson:"node_id" json:"node_id"`
	NodeType       string         `bson:"node_type" json:"node_type"`
	Visit          int            `bson:"visit" json:"visit"`
	Sequence       int            `bson:"sequence" json:"sequence"`
	CodeExecuted   string         `bson:"code_executed,omitempty" json:"code_executed,omitempty"`
	InputContext   map[string]any `bson:"input_context" json:"input_context"`
	OutputResult   map[string]any `bson:"output_result" json:"output_result"`
	ExecutionTime  float64        `bson:"execution_time" json:"execution_time"` // milliseconds
	Status         string         `bson:"status" json:"status"`
	ErrorMessage   string         `bson:"error_message,omitempty" json:"error_message,omitempty"`
	DecisionResult string         `bson:"decision_result,omitempty" json:"decision_result,omitempty"`
	PathTaken      string         `bson:"path_taken,omitempty" json:"path_taken,omitempty"`
	AIMetadata     map[string]any `bson:"ai_metadata,omitempty" json:"ai_metadata,omitempty"`
	// OutputAnalysis is the shape of the node's output (type, isStructured,
	// itemCount, fields), for field feedback and refinement.
	OutputAnalysis map[string]any `bson:"output_analysis,omitempty" json:"output_analysis,omitempty"`
	// What this visit's model calls cost and how many; error_kind is
	// "budget_exceeded" when a model call would not fit a budget.
	CostUSD     float64    `bson:"cost_usd" json:"cost_usd"`
	ModelCalls  int        `bson:"model_calls" json:"model_calls"`
	ErrorKind   string     `bson:"error_kind,omitempty" json:"error_kind,omitempty"`
	Stdout      string     `bson:"stdout,omitempty" json:"stdout,omitempty"`
	Stderr      string     `bson:"stderr,omitempty" json:"stderr,omitempty"`
	Traceback   string     `bson:"traceback,omitempty" json:"traceback,omitempty"`
	StartedAt   *time.Time `bson:"started_at" json:"started_at,omitempty"`
	CompletedAt *time.Time `bson:"completed_at" json:"completed_at,omitempty"`
	// Timestamp is CompletedAt, else StartedAt; stored only when it is
	// neither (Chain fills it in).
	Timestamp *time.Time `bson:"timestamp,omitempty" json:"timestamp,omitempty"`
	// Attempt is the retry policy's attempt this visit is (set when the node
	// has a policy); a failed one that is tried again names when.
	Attempt       int        `bson:"attempt,omitempty" json:"attempt,omitempty"`
	NextAttemptAt *time.Time `bson:"next_attempt_at,omitempty" json:"next_attempt_at,omitempty"`
	// Signal is the signal that resumed a wait node; TimedOut says none came
	// in time.
	Signal   *SignalDoc `bson:"signal,omitempty" json:"signal,omitempty"`
	TimedOut bool       `bson:"timed_out,omitempty" json:"timed_out,omitempty"`
	// CarriedOverFrom is, for a rerun's node that was not run again, the
	// execution where it ran.
	CarriedOverFrom string `bson:"carried_over_from,omitempty" json:"carried_over_from,omitempty"`
	// Branch is the branch the visit ran in, when the execution ran several
	// at once; Item is a map item's position (each item of a map node is a
	// visit of its own, its id ending in #<item>).
	Branch string `bson:"branch,omitempty" json:"branch,omitempty"`
	Item   *int   `bson:"item,omitempty" json:"item,omitempty"`
	// ChildExecutionIDs are the executions a workflow node (or a map over a
	// sub-workflow) started.
	ChildExecutionIDs []string `bson:"child_execution_ids,omitempty" json:"child_execution_ids,omitempty"`

	// Steps are the agent steps of this visit, by step number; filled by Chain, not stored.
	Steps []StepDoc `bson:"-" json:"steps,omitempty"`
}

// SignalDoc is a signal a wait node took: its name, payload (secrets
// hidden), who sent it and when it came.
type SignalDoc struct {
	Name       string         `bson:"name" json:"name"`
	Payload    map[string]any `bson:"payload,omitempty" json:"payload,omitempty"`
	SentBy     string         `bson:"sent_by,omitempty" json:"sent_by,omitempty"`
	ReceivedAt *time.Time     `bson:"received_at,omitempty" json:"received_at,omitempty"`
}

// StepDoc is a chain_of_work_steps document: one agent step inside a node visit.
type StepDoc struct {
	ID          string `bson:"_id" json:"id"`
	ExecutionID string `bson:"execution_id" json:"execution_id"`
	NodeID      string `bson:"node_id" json:"node_id"`
	Visit       int    `bson:"visit" json:"visit"`
	// Not stored: the _id of the visit, from execution_id, node_id and
	// visit (Chain fills it in).
	ChainOfWorkID string `bson:"chain_of_work_id,omitempty" json:"chain_of_work_id"`
	// Item is a map item's position, when the step is one of an item's.
	Item            *int           `bson:"item,omitempty" json:"item,omitempty"`
	StepNumber      int            `bson:"step_number" json:"step_number"`
	StepName        string         `bson:"step_name" json:"step_name"`
	AgentName       string         `bson:"agent_name" json:"agent_name"`
	AttemptNumber   int            `bson:"attempt_number" json:"attempt_number"`
	InputData       map[string]any `bson:"input_data" json:"input_data"`
	OutputData      map[string]any `bson:"output_data" json:"output_data"`
	GeneratedCode   string         `bson:"generated_code,omitempty" json:"generated_code,omitempty"`
	SandboxID       string         `bson:"sandbox_id,omitempty" json:"sandbox_id,omitempty"`
	ModelUsed       string         `bson:"model_used,omitempty" json:"model_used,omitempty"`
	TokensInput     int64          `bson:"tokens_input" json:"tokens_input"`
	TokensOutput    int64          `bson:"tokens_output" json:"tokens_output"`
	CostUSD         float64        `bson:"cost_usd" json:"cost_usd"`
	ToolCalls       []any          `bson:"tool_calls,omitempty" json:"tool_calls,omitempty"`
	Status          string         `bson:"status" json:"status"`
	ErrorMessage    string         `bson:"error_message,omitempty" json:"error_message,omitempty"`
	ExecutionTimeMs float64        `bson:"execution_time_ms" json:"execution_time_ms"`
	Timestamp       *time.Time     `bson:"timestamp" json:"timestamp,omitempty"`
}

// Execution returns the execution document, or an error wrapping ErrNotFound.
func (s *Store) Execution(ctx context.Context, id string) (*ExecutionDoc, error) {
	var doc ExecutionDoc
	err := s.executions.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("execution %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("execution %q: %w", id, err)
	}
	doc.InitialContext = readContext(doc.InitialContext)
	doc.FinalContext = readContext(doc.FinalContext)
	return &doc, nil
}

// unescapeMap restores the keys structToMap escaped.
func unescapeMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := unescapeKeys(m).(map[string]any)
	return out
}

// Chain returns the node visits of an execution in the order they ran, each with its
// steps. A node visit whose steps are recorded but which has not completed yet is
// appended at the end with status "running", so a chain read mid-run shows the work in
// progress. An unknown execution has an empty chain.
func (s *Store) Chain(ctx context.Context, executionID string) ([]NodeDoc, error) {
	indexed, err := s.indexReady(ctx)
	if err != nil {
		return nil, err
	}
	read := s.queriedChain
	if indexed {
		read = s.indexedChain
	}
	nodes, steps, err := read(ctx, executionID)
	if err != nil {
		return nil, err
	}

	byNode := make(map[string]int, len(nodes))
	for i := range nodes {
		byNode[nodes[i].ID] = i
		n := &nodes[i]
		n.InputContext, n.OutputResult = readContext(n.InputContext), readContext(n.OutputResult)
		if n.Signal != nil {
			n.Signal.Payload = readContext(n.Signal.Payload)
		}
		n.AIMetadata = readAIMetadata(unescapeMap(n.AIMetadata), n.CodeExecuted)
		if n.Timestamp == nil {
			n.Timestamp = firstTime(n.CompletedAt, n.StartedAt)
		}
	}
	for _, st := range steps {
		if st.ChainOfWorkID == "" {
			st.ChainOfWorkID = ItemDocID(st.ExecutionID, st.NodeID, int32(st.Visit), st.Item)
		}
		st.InputData, st.OutputData = unescapeMap(st.InputData), unescapeMap(st.OutputData)
		if st.ToolCalls != nil {
			st.ToolCalls, _ = unescapeKeys(st.ToolCalls).([]any)
		}
		i, ok := byNode[st.ChainOfWorkID]
		if !ok {
			nodes = append(nodes, NodeDoc{
				ID:          st.ChainOfWorkID,
				ExecutionID: st.ExecutionID,
				NodeID:      st.NodeID,
				Visit:       st.Visit,
				Status:      StatusRunning,
			})
			i = len(nodes) - 1
			byNode[st.ChainOfWorkID] = i
		}
		nodes[i].Steps = append(nodes[i].Steps, st)
	}
	if nodes == nil {
		nodes = []NodeDoc{}
	}
	return nodes, nil
}

// queriedChain reads an execution's node visits and steps with a query on
// execution_id each.
func (s *Store) queriedChain(ctx context.Context, executionID string) ([]NodeDoc, []StepDoc, error) {
	filter := bson.D{{Key: "execution_id", Value: executionID}}

	var nodes []NodeDoc
	cur, err := s.chain.Find(ctx, filter, options.Find().SetSort(bson.D{
		{Key: "sequence", Value: 1}, {Key: "started_at", Value: 1}, {Key: "_id", Value: 1},
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("chain of %q: %w", executionID, err)
	}
	if err := cur.All(ctx, &nodes); err != nil {
		return nil, nil, fmt.Errorf("chain of %q: %w", executionID, err)
	}

	var steps []StepDoc
	cur, err = s.steps.Find(ctx, filter, options.Find().SetSort(bson.D{
		{Key: "node_id", Value: 1}, {Key: "visit", Value: 1},
		{Key: "step_number", Value: 1}, {Key: "timestamp", Value: 1},
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("steps of %q: %w", executionID, err)
	}
	if err := cur.All(ctx, &steps); err != nil {
		return nil, nil, fmt.Errorf("steps of %q: %w", executionID, err)
	}
	return nodes, steps, nil
}

// Counts returns how many documents each collection holds for an execution, keyed by
// collection name.
func (s *Store) Counts(ctx context.Context, executionID string) (map[string]int64, error) {
	if indexed, err := s.indexReady(ctx); err != nil {
		return nil, err
	} else if indexed {
		return s.indexedCounts(ctx, executionID)
	}
	counts := make(map[string]int64, 3)
	for _, q := range []struct {
		coll   *mongo.Collection
		filter bson.D
	}{
		{s.executions, bson.D{{Key: "_id", Value: executionID}}},
		{s.chain, bson.D{{Key: "execution_id", Value: executionID}}},
		{s.steps, bson.D{{Key: "execution_id", Value: executionID}}},
	} {
		n, err := q.coll.CountDocuments(ctx, q.filter)
		if err != nil {
			return nil, fmt.Errorf("count %s of %q: %w", q.coll.Name(), executionID, err)
		}
		counts[q.coll.Name()] = n
	}
	return counts, nil
}

// AllCounts returns Counts for every execution that has a document in any
// collection, reading each collection once (only its execution ids), for
// checks over many executions.
func (s *Store) AllCounts(ctx context.Context) (map[string]map[string]int64, error) {
	all := map[string]map[string]int64{}
	for _, q := range []struct {
		coll  *mongo.Collection
		field string
	}{
		{s.executions, "_id"},
		{s.chain, "execution_id"},
		{s.steps, "execution_id"},
	} {
		cur, err := q.coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: q.field, Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", q.coll.Name(), err)
		}
		for cur.Next(ctx) {
			id, ok := cur.Current.Lookup(q.field).StringValueOK()
			if !ok {
				continue
			}
			if all[id] == nil {
				all[id] = map[string]int64{ExecutionsCollection: 0, ChainCollection: 0, StepsCollection: 0}
			}
			all[id][q.coll.Name()]++
		}
		err = cur.Err()
		_ = cur.Close(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", q.coll.Name(), err)
		}
	}
	return all, nil
}

// DefinitionDoc is a workflow definition as an execution document holds it
// (ExecutionDoc.Definition).
func DefinitionDoc(def *novav1.WorkflowDefinition) (map[string]any, error) { return protoToMap(def) }

// protoToMap stores a message as a document with the field names of its .proto file,
// the same JSON a user sees from the API.
func protoToMap(m proto.Message) (map[string]any, error) {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil, nil
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}
