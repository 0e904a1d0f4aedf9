// Package chainstore is the chain of work in MongoDB: its documents' schema
// (one per execution, one per node visit and one per agent step), the
// reader the gateway and the nova CLI use, and the writer the audit
// service, its only writer, uses. Every write is keyed by an id derived from
// the event, so JetStream redelivery and replays never create duplicates, and events
// arriving out of order still converge on the same documents.
//
// Every write and every read of one execution finds its documents by _id or,
// on MongoDB, through an index, so that neither slows down as the history
// grows. On FerretDB, which pushes down no filter but one on _id, the
// documents of an execution are found through IndexCollection.
//
// ListExecutions lists executions newest first, filtered. On MongoDB it
// runs a query that the indexes EnsureIndexes creates serve. On FerretDB,
// which would read and sort every execution for it, it walks
// ListingCollection, the executions by start minute with their workflow and
// status, from the newest minute back, and reads the page's executions by
// _id.
package chainstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultDatabase is used when Open is given an empty database name.
const DefaultDatabase = "nova"

// Collection names, shared with anything that reads the chain of work directly.
const (
	ExecutionsCollection = "executions"
	ChainCollection      = "chain_of_work"
	StepsCollection      = "chain_of_work_steps"
)

// StatusRunning is the status of an execution that has started and not yet completed.
const StatusRunning = "running"

var (
	// ErrNotFound is returned by reads when the execution does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidEvent is returned by writes for an event that can never be stored (no
	// execution id, no node id); the consumer should not retry it.
	ErrInvalidEvent = errors.New("invalid event")
)

// Store reads and writes the chain of work.
type Store struct {
	client     *mongo.Client
	executions *mongo.Collection
	chain      *mongo.Collection
	steps      *mongo.Collection
	index      *mongo.Collection

	// indexed: the documents of an execution are listed in index, and
	// read by _id through it (see IndexCollection).
	indexed    bool
	forceIndex *bool
	// queryIndexes: EnsureIndexes creates the indexes of the queries, else
	// drops them (off on FerretDB, which reads none; see EnsureIndexes).
	queryIndexes      bool
	forceQueryIndexes *bool
	positions         positions
	indexMu           sync.Mutex  // see indexAll
	backfilled        atomic.Bool // see indexReady

	// listed: executions are listed by start time in listing, and
	// ListExecutions reads through it (see ListingCollection).
	listing           *mongo.Collection
	listed            bool
	forceListing      *bool
	listPositions     positions
	listMu            sync.Mutex              // see appendLog
	listNewest        map[int]string          // by time level: the newest key this process appended to
	listRecent        map[string]listingEntry // see remember
	listingBackfilled atomic.Bool             // see listingReady

	// ttl: the retention is kept by TTL indexes (see EnsureRetention);
	// stampEnded: completions set EndedField for them.
	ttl        bool
	forceTTL   *bool
	stampEnded atomic.Bool
	sweepMu    sync.Mutex // DeleteEnded on the listing
	swept      time.Time  // the listing's minutes up to here are deleted

	monitor *event.CommandMonitor // tests watch the commands sent
}

// Open connects to the MongoDB at uri, checks it answers, and uses database (DefaultDatabase
// when empty). It does not create indexes; call EnsureIndexes at start-up.
func Open(ctx context.Context, uri, database string, opts ...Option) (*Store, error) {
	if database == "" {
		database = DefaultDatabase
	}
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	client, err := mongo.Connect(options.Client().
		ApplyURI(uri).
		SetMonitor(s.monitor).
		// Contexts and snapshots are read back as plain maps so the CLI can print them
		// as JSON; the driver's default (bson.D) would print as key/value pairs.
		SetBSONOptions(&options.BSONOptions{DefaultDocumentMap: true}))
	if err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	if err := client.Ping(ctx, nil); err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("open audit store: ping: %w", err)
	}
	ferret, err := isFerretDB(ctx, client)
	if err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	s.indexed, s.listed, s.queryIndexes = ferret, ferret, !ferret
	if s.forceIndex != nil {
		s.indexed = *s.forceIndex
	}
	if s.forceListing != nil {
		s.listed = *s.forceListing
	}
	if s.forceQueryIndexes != nil {
		s.queryIndexes = *s.forceQueryIndexes
	}
	s.ttl = !ferret // FerretDB 1.x has no TTL indexes
	if s.forceTTL != nil {
		s.ttl = *s.forceTTL
	}
	db := client.Database(database)
	s.client = client
	s.executions = db.Collection(ExecutionsCollection)
	s.chain = db.Collection(ChainCollection)
	s.steps = db.Collection(StepsCollection)
	s.index = db.Collection(IndexCollection)
	s.listing = db.Collection(ListingCollection)
	return s, nil
}

// Close disconnects, waiting for in-flight operations until ctx ends.
func (s *Store) Close(ctx context.Context) error {
	if err := s.client.Disconnect(ctx); err != nil {
		return fmt.Errorf("close audit store: %w", err)
	}
	return nil
}

// Unreachable reports whether err is the store not answering (no server
// to select, a network error, a timeout) rather than the store refusing
// what was written: a writer keeps what it could not write for later.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, ErrInvalidEvent) {
		return false
	}
	return mongo.IsNetworkError(err) || mongo.IsTimeout(err) || errors.As(err, &topology.ServerSelectionError{}) ||
		errors.Is(err, mongo.ErrClientDisconnected)
}

// NoServer reports whether err says that no server of the store could be
// reached (none to select, a connection refused or cut), as opposed to one
// that answers slowly, whose error is a timeout: a reader can then tell an
// outage from a busy store.
func NoServer(err error) bool {
	return err != nil && (errors.As(err, &topology.ServerSelectionError{}) || mongo.IsNetworkError(err) ||
		errors.Is(err, mongo.ErrClientDisconnected))
}

// Ping checks that the database answers, for readiness probes.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping audit store: %w", err)
	}
	return nil
}

// EnsureIndexes creates the indexes the CLI's and the gateway's queries use
// (queryIndexes). It is idempotent: existing indexes with the same keys and
// names are left alone, so it runs at every start-up. With IndexCollection in
// use, it lists there, once, the documents recorded before (reading both
// collections whole); with ListingCollection, there the executions recorded
// before (reading the executions whole).
//
// On FerretDB it creates none of them and drops those an earlier start
// created: FerretDB 1.24 on SQLite runs every query but one by _id by reading
// the whole collection, and sorts in memory, so it never reads these indexes,
// but every insert and update writes each of them (on SQLite, an index entry
// computed from the document's JSON for every key).
//
// Each index is created with its own createIndexes command: FerretDB v1.24 panics (and
// drops the connection) on a createIndexes command listing more than one index that
// already exists. It accepts all these indexes on SQLite, descending keys included.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	for _, ix := range s.queryIndexList() {
		if err := s.ensureIndex(ctx, ix); err != nil {
			return err
		}
	}
	if s.indexed {
		if err := s.backfillIndex(ctx); err != nil {
			return err
		}
	}
	if s.listed {
		return s.backfillListing(ctx)
	}
	return nil
}

// queryIndex is an index of a query, on its collection.
type queryIndex struct {
	coll *mongo.Collection
	name string
	keys bson.D
}

// queryIndexList are the indexes of the queries of Chain, Counts and
// ListExecutions on a server that uses them.
func (s *Store) queryIndexList() []queryIndex {
	return []queryIndex{
		{s.chain, "execution_sequence", bson.D{{Key: "execution_id", Value: 1}, {Key: "sequence", Value: 1}}},
		{s.steps, "execution_node_visit_step", bson.D{
			{Key: "execution_id", Value: 1}, {Key: "node_id", Value: 1},
			{Key: "visit", Value: 1}, {Key: "step_number", Value: 1},
		}},
		{s.executions, "started_at", bson.D{{Key: "started_at", Value: -1}}},
		{s.executions, "workflow_started_at", bson.D{{Key: "workflow_name", Value: 1}, {Key: "started_at", Value: -1}}},
		// ListExecutions: newest first with the execution id as tie-breaker,
		// and the same filtered by status.
		{s.executions, "started_at_id", bson.D{{Key: "started_at", Value: -1}, {Key: "_id", Value: -1}}},
		{s.executions, "status_started_at", bson.D{{Key: "status", Value: 1}, {Key: "started_at", Value: -1}}},
	}
}

// ensureIndex creates ix, or with queryIndexes off drops the index of its
// name if there is one.
func (s *Store) ensureIndex(ctx context.Context, ix queryIndex) error {
	if s.queryIndexes {
		model := mongo.IndexModel{Keys: ix.keys, Options: options.Index().SetName(ix.name)}
		if _, err := ix.coll.Indexes().CreateOne(ctx, model); err != nil {
			return fmt.Errorf("create index on %s: %w", ix.coll.Name(), err)
		}
		return nil
	}
	specs, err := ix.coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("list indexes of %s: %w", ix.coll.Name(), err)
	}
	if !slices.ContainsFunc(specs, func(spec mongo.IndexSpecification) bool { return spec.Name == ix.name }) {
		return nil
	}
	if err := ix.coll.Indexes().DropOne(ctx, ix.name); err != nil {
		return fmt.Errorf("drop index %s of %s: %w", ix.name, ix.coll.Name(), err)
	}
	return nil
}

// RecordWorkflowStarted creates or completes the execution document with what is known
// at the start. The status is only set when the document is created, so a started event
// redelivered after the completed one cannot turn a finished execution back to running.
// It inserts first, which needs no lookup; only when the document exists (a
// redelivery, or the completion recorded first) does it update.
func (s *Store) RecordWorkflowStarted(ctx context.Context, ev *novav1.WorkflowStarted) error {
	id, set, err := startedFields(ev)
	if err != nil {
		return err
	}
	listed, checked, err := s.startedAlone(ctx, id, set)
	if err != nil {
		return err
	}
	if err := s.listOne(ctx, listed, checked); err != nil {
		return fmt.Errorf("record workflow started %s: %w", id, err)
	}
	return nil
}

// startedAlone writes a started event's execution document on its own, as
// RecordWorkflowStarted does, and tells how to list it (see upsertExecution).
func (s *Store) startedAlone(ctx context.Context, id string, set bson.D) (listedExecution, bool, error) {
	doc := startedDoc(id, set)
	_, err := s.executions.InsertOne(ctx, doc)
	if mongo.IsDuplicateKeyError(err) {
		return s.startedExisting(ctx, id, set)
	}
	if err != nil {
		return listedExecution{}, false, fmt.Errorf("record workflow started %s: %w", id, err)
	}
	return listedOf(id, doc), false, nil
}

// startedFields are the fields of the execution document a started event
// sets.
func startedFields(ev *novav1.WorkflowStarted) (id string, set bson.D, err error) {
	id = ev.GetExecutionId()
	if id == "" {
		return "", nil, fmt.Errorf("record workflow started: %w: no execution id", ErrInvalidEvent)
	}
	def, err := protoToMap(ev.GetDefinition())
	if err != nil {
		return "", nil, fmt.Errorf("record workflow started %s: definition: %w", id, err)
	}
	set = bson.D{
		{Key: "execution_id", Value: id},
		{Key: "initial_context", Value: contextDoc(ev.GetContext())},
		{Key: "definition", Value: def},
	}
	if name := ev.GetWorkflowName(); name != "" {
		set = append(set, bson.E{Key: "workflow_name", Value: name})
	}
	if t := timeOf(ev.GetStartedAt()); t != nil {
		set = append(set, bson.E{Key: "started_at", Value: t})
	}
	if r := ev.GetRerun(); r != nil {
		set = append(set, bson.E{Key: "rerun_of", Value: r.GetExecutionId()}, bson.E{Key: "rerun_from", Value: r.GetNodeId()})
	}
	if sid := ev.GetScheduleId(); sid != "" {
		set = append(set, bson.E{Key: "schedule_id", Value: sid}, bson.E{Key: "scheduled_at", Value: timeOf(ev.GetScheduledAt())})
	}
	if p := ev.GetParent(); p.GetExecutionId() != "" {
		set = append(set, bson.E{Key: "parent_execution_id", Value: p.GetExecutionId()}, bson.E{Key: "parent_node", Value: p.GetNodeId()})
	}
	return id, set, nil
}

// startedDoc is the execution document a started event creates.
func startedDoc(id string, set bson.D) bson.D {
	doc := append(bson.D{{Key: "_id", Value: id}}, set...)
	return append(doc, bson.E{Key: "status", Value: StatusRunning})
}

// startedExisting records a started event whose execution document exists
// (or, after a lost race, is about to), and tells how to list it.
func (s *Store) startedExisting(ctx context.Context, id string, set bson.D) (listedExecution, bool, error) {
	listed, changed, err := s.upsertExecution(ctx, id, set, bson.D{{Key: "status", Value: StatusRunning}})
	if err != nil {
		return listedExecution{}, false, fmt.Errorf("record workflow started %s: %w", id, err)
	}
	return listed, !changed, nil
}

// RecordWorkflowCompleted sets the outcome on the execution document, creating it if the
// started event has not been recorded yet.
func (s *Store) RecordWorkflowCompleted(ctx context.Context, ev *novav1.WorkflowCompleted) error {
	id, set, err := completedFields(ev)
	if err != nil {
		return err
	}
	listed, checked, err := s.writeCompleted(ctx, id, set)
	if err != nil {
		return err
	}
	if s.stampEnded.Load() {
		if err := s.stamp(ctx, id, set); err != nil {
			return err
		}
	}
	if err := s.listOne(ctx, listed, checked); err != nil {
		return fmt.Errorf("record workflow completed %s: %w", id, err)
	}
	return nil
}

// writeCompleted sets a completed event's fields, and tells how to list
// the execution (see upsertExecution): checked when it changed nothing the
// listing holds, as a redelivery does.
func (s *Store) writeCompleted(ctx context.Context, id string, set bson.D) (listedExecution, bool, error) {
	listed, changed, err := s.upsertExecution(ctx, id, set, nil)
	if err != nil {
		return listedExecution{}, false, fmt.Errorf("record workflow completed %s: %w", id, err)
	}
	return listed, !changed, nil
}

// completedFields are the fields of the execution document a completed
// event sets.
func completedFields(ev *novav1.WorkflowCompleted) (id string, set bson.D, err error) {
	id = ev.GetExecutionId()
	if id == "" {
		return "", nil, fmt.Errorf("record workflow completed: %w: no execution id", ErrInvalidEvent)
	}
	nodes := make([]NodeSummaryDoc, 0, len(ev.GetNodes()))
	for _, n := range ev.GetNodes() {
		nodes = append(nodes, NodeSummaryDoc{
			ID:         n.GetId(),
			Status:     n.GetStatus(),
			Attempts:   int(n.GetAttempts()),
			Error:      hideSecrets(n.GetError()),
			Visits:     int(n.GetVisits()),
			CostUSD:    n.GetCostUsd(),
			ModelCalls: int(n.GetModelCalls()),
		})
	}
	path := ev.GetPath()
	if path == nil {
		path = []string{}
	}
	started, completed := timeOf(ev.GetStartedAt()), timeOf(ev.GetCompletedAt())
	set = bson.D{
		{Key: "execution_id", Value: id},
		{Key: "status", Value: ev.GetStatus()},
		{Key: "final_context", Value: contextDoc(ev.GetContext())},
		{Key: "path", Value: path},
		{Key: "nodes", Value: nodes},
		{Key: "error", Value: hideSecrets(ev.GetError())},
		{Key: "completed_at", Value: completed},
		{Key: "cost_usd", Value: ev.GetCostUsd()},
		{Key: "model_calls", Value: int(ev.GetModelCalls())},
	}
	if name := ev.GetWorkflowName(); name != "" {
		set = append(set, bson.E{Key: "workflow_name", Value: name})
	}
	if by := ev.GetCancelledBy(); by != "" {
		set = append(set, bson.E{Key: "cancelled_by", Value: hideSecrets(by)}, bson.E{Key: "cancel_reason", Value: hideSecrets(ev.GetCancelReason())})
	}
	if ev.GetRerunOf() != "" {
		set = append(set, bson.E{Key: "rerun_of", Value: ev.GetRerunOf()})
	}
	if started != nil {
		// Same instant as the started event's; set here too so an execution whose
		// started event is late still sorts by start time.
		set = append(set, bson.E{Key: "started_at", Value: started})
		if completed != nil {
			set = append(set, bson.E{Key: "duration_ms", Value: completed.Sub(*started).Milliseconds()})
		}
	}
	return id, set, nil
}

// RecordNode stores one node visit; a redelivery replaces the document with itself.
func (s *Store) RecordNode(ctx context.Context, ev *novav1.NodeCompleted) error {
	doc, err := nodeDoc(ev)
	if err != nil {
		return err
	}
	if err := s.record(ctx, s.chain, doc.ID, doc.ExecutionID, doc); err != nil {
		return fmt.Errorf("record node %s: %w", doc.ID, err)
	}
	return nil
}

// nodeDoc is the chain_of_work document of a node visit as stored.
func nodeDoc(ev *novav1.NodeCompleted) (NodeDoc, error) {
	if ev.GetExecutionId() == "" || ev.GetNodeId() == "" {
		return NodeDoc{}, fmt.Errorf("record node: %w: execution id %q, node id %q", ErrInvalidEvent, ev.GetExecutionId(), ev.GetNodeId())
	}
	doc := NodeDocOf(ev)
	doc.InputContext, doc.OutputResult = bsonContext(doc.InputContext), bsonContext(doc.OutputResult)
	if doc.Signal != nil {
		sig := *doc.Signal
		sig.Payload = bsonContext(sig.Payload)
		doc.Signal = &sig
	}
	doc.AIMetadata = storedAIMetadata(doc.AIMetadata, doc.CodeExecuted)
	if doc.Timestamp != nil && sameTime(doc.Timestamp, firstTime(doc.CompletedAt, doc.StartedAt)) {
		doc.Timestamp = nil // the same instant twice in one document
	}
	return doc, nil
}

// storedAIMetadata is an AI node's ai_metadata as stored: without its
// generated_code when that is the node's code_executed, the same code
// twice in one document (Chain puts it back, see readAIMetadata).
func storedAIMetadata(ai map[string]any, code string) map[string]any {
	if generated, ok := ai["generated_code"].(string); !ok || generated == "" || generated != code {
		return ai
	}
	ai = maps.Clone(ai)
	delete(ai, "generated_code")
	return ai
}

// readAIMetadata is ai_metadata as it was told: with generated_code, the
// node's code_executed where storedAIMetadata left it out (every AI node's
// ai_metadata has one).
func readAIMetadata(ai map[string]any, code string) map[string]any {
	if ai == nil {
		return nil
	}
	if _, ok := ai["generated_code"]; !ok {
		ai["generated_code"] = code
	}
	return ai
}

// NodeDocOf is the chain_of_work document of a node visit as its event
// tells it, secrets hidden, its contexts exact JSON values (json.Number):
// what the store keeps and what a live stream shows of it.
func NodeDocOf(ev *novav1.NodeCompleted) NodeDoc {
	started, completed := timeOf(ev.GetStartedAt()), timeOf(ev.GetCompletedAt())
	return NodeDoc{
		ID:                ItemDocID(ev.GetExecutionId(), ev.GetNodeId(), ev.GetVisit(), intPtr(ev.Item)),
		ExecutionID:       ev.GetExecutionId(),
		NodeID:            ev.GetNodeId(),
		NodeType:          ev.GetNodeType(),
		Visit:             int(ev.GetVisit()),
		Sequence:          int(ev.GetSequence()),
		CodeExecuted:      hideSecrets(ev.GetCodeExecuted()),
		InputContext:      jsonContext(ev.GetInputContext()),
		OutputResult:      jsonContext(ev.GetOutputResult()),
		ExecutionTime:     ev.GetExecutionTimeMs(),
		Status:            ev.GetStatus(),
		ErrorMessage:      hideSecrets(ev.GetErrorMessage()),
		DecisionResult:    ev.GetDecisionResult(),
		PathTaken:         ev.GetPathTaken(),
		AIMetadata:        structToMap(ev.GetAiMetadata()),
		OutputAnalysis:    structToMap(ev.GetOutputAnalysis()),
		CostUSD:           ev.GetCostUsd(),
		ModelCalls:        int(ev.GetModelCalls()),
		ErrorKind:         ev.GetErrorKind(),
		Stdout:            hideSecrets(ev.GetStdout()),
		Stderr:            hideSecrets(ev.GetStderr()),
		Traceback:         hideSecrets(ev.GetTraceback()),
		StartedAt:         started,
		CompletedAt:       completed,
		Timestamp:         firstTime(completed, started),
		Attempt:           int(ev.GetAttempt()),
		NextAttemptAt:     timeOf(ev.GetNextAttemptAt()),
		Signal:            signalDoc(ev.GetSignal()),
		TimedOut:          ev.GetTimedOut(),
		CarriedOverFrom:   ev.GetCarriedOverFrom(),
		Branch:            ev.GetBranch(),
		Item:              intPtr(ev.Item),
		ChildExecutionIDs: ev.GetChildExecutionIds(),
	}
}

// intPtr is an optional position as an int, nil when unset.
func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	return new(int(*p))
}

// signalDoc is the record of a signal a wait node took, nil for none.
func signalDoc(s *novav1.SignalReceived) *SignalDoc {
	if s == nil {
		return nil
	}
	return &SignalDoc{Name: s.GetName(), Payload: jsonContext(s.GetPayload()), SentBy: s.GetSentBy(), ReceivedAt: timeOf(s.GetReceivedAt())}
}

// RecordStep stores one agent step; a redelivery replaces the document with itself.
func (s *Store) RecordStep(ctx context.Context, ev *novav1.StepCompleted) error {
	doc, err := stepDoc(ev)
	if err != nil {
		return err
	}
	if err := s.record(ctx, s.steps, doc.ID, doc.ExecutionID, doc); err != nil {
		return fmt.Errorf("record step %s: %w", doc.ID, err)
	}
	return nil
}

func stepDoc(ev *novav1.StepCompleted) (StepDoc, error) {
	if ev.GetExecutionId() == "" || ev.GetNodeId() == "" {
		return StepDoc{}, fmt.Errorf("record step: %w: execution id %q, node id %q", ErrInvalidEvent, ev.GetExecutionId(), ev.GetNodeId())
	}
	doc := StepDocOf(ev)
	doc.ChainOfWorkID = "" // its visit's _id, from three fields of the document
	return doc, nil
}

// StepDocOf is the chain_of_work_steps document of one agent step as its
// event tells it, secrets hidden.
func StepDocOf(ev *novav1.StepCompleted) StepDoc {
	var toolCalls []any
	if tc := ev.GetToolCalls(); tc != nil {
		toolCalls, _ = escapeKeys(redact.Value(tc.AsSlice())).([]any)
	}
	return StepDoc{
		ID:              StepDocID(ev.GetExecutionId(), ev.GetStepId(), ev.GetNodeId(), ev.GetVisit(), ev.GetStepNumber()),
		ExecutionID:     ev.GetExecutionId(),
		NodeID:          ev.GetNodeId(),
		Visit:           int(ev.GetVisit()),
		ChainOfWorkID:   ItemDocID(ev.GetExecutionId(), ev.GetNodeId(), ev.GetVisit(), intPtr(ev.Item)),
		Item:            intPtr(ev.Item),
		StepNumber:      int(ev.GetStepNumber()),
		StepName:        ev.GetStepName(),
		AgentName:       ev.GetAgentName(),
		AttemptNumber:   int(ev.GetAttemptNumber()),
		InputData:       structToMap(ev.GetInputData()),
		OutputData:      structToMap(ev.GetOutputData()),
		GeneratedCode:   hideSecrets(ev.GetGeneratedCode()),
		SandboxID:       ev.GetSandboxId(),
		ModelUsed:       ev.GetModelUsed(),
		TokensInput:     ev.GetTokensInput(),
		TokensOutput:    ev.GetTokensOutput(),
		CostUSD:         ev.GetCostUsd(),
		ToolCalls:       toolCalls,
		Status:          ev.GetStatus(),
		ErrorMessage:    hideSecrets(ev.GetErrorMessage()),
		ExecutionTimeMs: ev.GetExecutionTimeMs(),
		Timestamp:       timeOf(ev.GetTimestamp()),
	}
}

// NodeDocID is the chain_of_work id of one node visit.
func NodeDocID(executionID, nodeID string, visit int32) string {
	return executionID + "/" + nodeID + "/" + strconv.Itoa(int(visit))
}

// ItemDocID is the chain_of_work id of one node visit, or, with item, of
// one item of a map node's visit.
func ItemDocID(executionID, nodeID string, visit int32, item *int) string {
	id := NodeDocID(executionID, nodeID, visit)
	if item != nil {
		id += "#" + strconv.Itoa(*item)
	}
	return id
}

// StepDocID is the chain_of_work_steps id of one step: the step id the pipeline assigned
// when there is one (it already names exactly one step), else its position.
func StepDocID(executionID, stepID, nodeID string, visit, stepNumber int32) string {
	if stepID != "" {
		if strings.HasPrefix(stepID, executionID+"/") {
			return stepID // the engine's step ids already start with the execution
		}
		return executionID + "/" + stepID
	}
	return NodeDocID(executionID, nodeID, visit) + "/" + strconv.Itoa(int(stepNumber))
}

// upsert applies update to the document with id, creating it if needed.
func (s *Store) upsert(ctx context.Context, coll *mongo.Collection, id string, update bson.D) error {
	return retryDuplicate(func() error {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update, options.UpdateOne().SetUpsert(true))
		return err
	})
}

// record writes doc as the document id of coll (a chain_of_work or
// chain_of_work_steps document) and lists it in its execution's index.
func (s *Store) record(ctx context.Context, coll *mongo.Collection, id, executionID string, doc any) error {
	first, err := s.replace(ctx, coll, id, doc)
	if err != nil {
		return err
	}
	return s.indexDoc(ctx, executionID, coll.Name(), id, first)
}

// replace writes doc as the document with id, and tells whether it was the
// first to. The first delivery inserts; only a redelivery (the id exists)
// replaces, which costs a lookup by _id besides.
func (s *Store) replace(ctx context.Context, coll *mongo.Collection, id string, doc any) (first bool, err error) {
	_, err = coll.InsertOne(ctx, doc)
	if !mongo.IsDuplicateKeyError(err) {
		return err == nil, err
	}
	return false, replaceExisting(ctx, coll, id, doc)
}

// replaceExisting replaces the document with id, which exists, by doc.
func replaceExisting(ctx context.Context, coll *mongo.Collection, id string, doc any) error {
	_, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}}, doc, options.Replace().SetUpsert(true))
	return err
}

// retryDuplicate runs an upsert again once if it lost an insert race: two replicas
// handling the same event (or the started and completed events) can both find no
// document and both insert; the loser's retry then takes the update path.
func retryDuplicate(write func() error) error {
	err := write()
	if mongo.IsDuplicateKeyError(err) {
		err = write()
	}
	return err
}

// hideSecrets hides the secrets a stored text shows by their look
// (redact.Text): code, its output and error messages can quote one that the
// engine did not know of. Contexts and agent data are redacted as maps.
func hideSecrets(s string) string { return redact.Scrub(s, nil) }

// structToMap converts a protobuf Struct to a redacted map for BSON, with its keys
// escaped (see escapeKeys); nil stays nil and is stored as null.
func structToMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	m, _ := escapeKeys(redact.Map(s.AsMap())).(map[string]any)
	return m
}

// Keys of contexts and agent data are the user's. MongoDB-compatible stores reject
// field names that start with '$' or contain '.' (FerretDB rejects both), and a value
// reference is {"$ref": ...}; such keys are stored with the full-width look-alikes of
// '$' and '.' and restored when read.
var (
	keyEscaper   = strings.NewReplacer("$", "\uFF04", ".", "\uFF0E")
	keyUnescaper = strings.NewReplacer("\uFF04", "$", "\uFF0E", ".")
)

func escapeKeys(v any) any { return mapKeys(v, keyEscaper) }

func unescapeKeys(v any) any { return mapKeys(v, keyUnescaper) }

// mapKeys returns v with the keys of every map in it, at any depth, rewritten.
func mapKeys(v any, r *strings.Replacer) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[r.Replace(k)] = mapKeys(e, r)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = mapKeys(e, r)
		}
		return out
	case bson.A:
		// Read back as a plain slice, as decoded JSON would be, so readers
		// (nova chain) need not know the driver's types.
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = mapKeys(e, r)
		}
		return out
	}
	return v
}

func timeOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func firstTime(ts ...*time.Time) *time.Time {
	for _, t := range ts {
		if t != nil {
			return t
		}
	}
	return nil
}
