package chainstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// RerunRequest asks for a new execution that reruns another from one of
// its nodes.
type RerunRequest struct {
	// From is the node to start from; "" means the node that failed.
	From string
	// Set are context changes merged into the snapshot.
	Set jsonvalue.Object
	// Definition, when set, is the revision to run (the workflow's newest);
	// nil runs the definition the execution ran.
	Definition *novav1.WorkflowDefinition
	// ExecutionID is the new execution's id; "" makes one.
	ExecutionID string
}

// ErrRerun is wrapped by the errors of a rerun that cannot be made from
// what the execution's chain of work holds: they name the problem (a node
// the execution never reached, one it has no failed node, one still
// running).
var ErrRerun = errors.New("cannot rerun")

// ErrRunning is wrapped by RerunStart for an execution that has not
// ended.
var ErrRunning = errors.New("execution is running")

// RerunStart is the start of a rerun of execution id as req asks: the
// definition it ran (or req.Definition), the context its chain of work
// holds before the last visit of the node to start from, with req.Set
// merged in, and the nodes it ran before that visit, to be recorded as
// carried over. An unknown execution wraps ErrNotFound.
func (s *Store) RerunStart(ctx context.Context, id string, req RerunRequest) (*novav1.StartWorkflow, error) {
	exec, err := s.Execution(ctx, id)
	if err != nil {
		return nil, err
	}
	if exec.Status == StatusRunning {
		return nil, fmt.Errorf("%w: execution %s is running: cancel it, or wait for its end, before rerunning it", ErrRunning, id)
	}
	all, err := s.Chain(ctx, id)
	if err != nil {
		return nil, err
	}
	// A map's items are visits inside its node's own: a rerun starts at,
	// and carries over, whole nodes.
	chain := slices.DeleteFunc(all, func(n NodeDoc) bool { return n.Item != nil })
	from, at, err := rerunNode(id, chain, req.From)
	if err != nil {
		return nil, err
	}
	def := req.Definition
	if def == nil {
		if def, err = ExecutionDefinition(exec); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRerun, err)
		}
	}
	if !hasNode(def, from) {
		return nil, fmt.Errorf("%w: node %q is not in workflow %q as it is to be run (revision without it)", ErrRerun, from, def.GetName())
	}
	snapshot, err := jsonvalue.ObjectOf(chain[at].InputContext)
	if err != nil {
		return nil, fmt.Errorf("%w: the context before node %q: %v", ErrRerun, from, err)
	}
	if snapshot == nil {
		snapshot = jsonvalue.Object{}
	}
	snapshot.Merge(req.Set)
	var carried []string
	for _, n := range chain[:at] {
		if n.Status == NodeSuccess || n.Status == NodeCarriedOver {
			carried = append(carried, n.NodeID)
		}
	}
	newID := req.ExecutionID
	if newID == "" {
		newID = uuid.NewString()
	}
	return &novav1.StartWorkflow{
		ExecutionId: newID,
		Definition:  def,
		Context:     snapshot.Proto(),
		Rerun:       &novav1.RerunFrom{ExecutionId: id, NodeId: from, CarriedOver: carried},
	}, nil
}

// Node visit statuses the chain of work records.
const (
	NodeSuccess     = "success"
	NodeFailed      = "failed"
	NodeCarriedOver = "carried_over"
)

// rerunNode is the node a rerun starts from and the index of its last
// visit in chain (ordered by sequence): from, or the last failed visit's
// node when from is "".
func rerunNode(id string, chain []NodeDoc, from string) (string, int, error) {
	if from == "" {
		for i := len(chain) - 1; i >= 0; i-- {
			if chain[i].Status == NodeFailed {
				return chain[i].NodeID, i, nil
			}
		}
		return "", 0, fmt.Errorf("%w: execution %s has no failed node; name the node to rerun from", ErrRerun, id)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		if chain[i].NodeID == from {
			return from, i, nil
		}
	}
	reached := make([]string, 0, len(chain))
	for _, n := range chain {
		if len(reached) == 0 || reached[len(reached)-1] != n.NodeID {
			reached = append(reached, n.NodeID)
		}
	}
	return "", 0, fmt.Errorf("%w: execution %s never reached node %q (it ran %s)", ErrRerun, id, from, strings.Join(reached, ", "))
}

func hasNode(def *novav1.WorkflowDefinition, id string) bool {
	for _, n := range def.GetNodes() {
		if n.GetId() == id {
			return true
		}
	}
	return false
}

// ExecutionDefinition is the definition an execution ran, as its document
// keeps it (protojson with the .proto field names).
func ExecutionDefinition(exec *ExecutionDoc) (*novav1.WorkflowDefinition, error) {
	if len(exec.Definition) == 0 {
		return nil, fmt.Errorf("the chain of work of %s holds no workflow definition", exec.ExecutionID)
	}
	raw, err := json.Marshal(exec.Definition)
	if err != nil {
		return nil, fmt.Errorf("definition of %s: %w", exec.ExecutionID, err)
	}
	def := &novav1.WorkflowDefinition{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, def); err != nil {
		return nil, fmt.Errorf("definition of %s: %w", exec.ExecutionID, err)
	}
	return def, nil
}

// LinkRerun records on execution orig's document that execution rerun
// reruns it; recorded twice, it is kept once. An original whose document
// is gone (past retention) is left alone.
func (s *Store) LinkRerun(ctx context.Context, orig, rerun string) error {
	_, err := s.executions.UpdateOne(ctx, bson.D{{Key: "_id", Value: orig}},
		bson.D{{Key: "$addToSet", Value: bson.D{{Key: "reruns", Value: rerun}}}})
	if err != nil {
		return fmt.Errorf("link rerun %s of %s: %w", rerun, orig, err)
	}
	return nil
}
