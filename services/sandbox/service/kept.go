package service

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// A program runs once per delivery of its command that reaches a sandbox,
// not once per attempt to publish its result. A run's result whose publish
// failed (the events stream refused it, or was out of reach longer than
// the publish retries) is kept in KV nova_sandbox_results (BucketResults),
// and the command is given back: its next delivery publishes the kept
// result instead of running the program again. A result published at once,
// nearly every one, is not kept: its event is the record. A replica killed
// after its run and before the command's acknowledgement (the moment of
// the publish's round trip) leaves the command to run again elsewhere; the
// result it may have published is the one stored (the publish of the run
// again carries the same message id, stored once within the events
// stream's duplicate window), and the graph engine takes a step's first
// result only. A result is made to fit one message first: its largest
// context values go to the value store, and a result that still does not
// fit is a failed run that says so.

// BucketResults keeps a result whose publish failed under
// <execution>.<step id, unpadded base64url> for resultsTTL.
const BucketResults = bus.BucketSandboxResults

// resultsTTL is how long a result is kept: far longer than a command's
// redeliveries take (AckWait, MaxDeliver and the backoff, a minute or so).
const resultsTTL = 15 * time.Minute

// resultsMaxBytes bounds the bucket; under a load that fills it, the oldest
// results go first, before their time.
const resultsMaxBytes = 1 << 30

// messageHeadroom is what a result's event needs beside its data: the
// CloudEvent's and the trace's headers.
const messageHeadroom = 16 << 10

// openResults declares the bucket.
func openResults(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := bus.Declare(ctx, "KV "+BucketResults, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      BucketResults,
			Description: "NOVA programs' results whose publish failed, kept for their command's next delivery",
			History:     1,
			TTL:         resultsTTL,
			MaxBytes:    resultsMaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", BucketResults, err)
	}
	return kv, nil
}

// resultKey is where the result of cmd is kept; "" for a command whose
// execution id a key cannot hold (its result is not kept).
func resultKey(cmd *novav1.ExecuteCode) string {
	if !execution.ValidKey(cmd.ExecutionId) {
		return ""
	}
	return cmd.ExecutionId + "." + base64.RawURLEncoding.EncodeToString([]byte(cmd.StepId))
}

// keptResult is the result an earlier delivery of cmd kept, nil when there
// is none.
func (s *server) keptResult(ctx context.Context, cmd *novav1.ExecuteCode) (*novav1.CodeExecuted, error) {
	key := resultKey(cmd)
	if s.results == nil || key == "" {
		return nil, nil
	}
	entry, err := s.results.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the kept result of %s: %w", cmd.StepId, err)
	}
	var res novav1.CodeExecuted
	if err := proto.Unmarshal(entry.Value(), &res); err != nil || res.StepId != cmd.StepId {
		return nil, nil // not one of ours: run the program
	}
	return &res, nil
}

// keep stores res, the result of cmd whose publish failed, for the
// command's next delivery; a result it cannot keep (the server out of
// reach) is logged, and that delivery runs the program again.
func (s *server) keep(ctx context.Context, cmd *novav1.ExecuteCode, res *novav1.CodeExecuted) {
	key := resultKey(cmd)
	if s.results == nil || key == "" {
		return
	}
	data, err := proto.Marshal(res)
	if err == nil {
		kctx, cancel := context.WithTimeout(ctx, keepTimeout)
		_, err = s.results.Put(kctx, key, data)
		cancel()
	}
	if err != nil {
		s.Logger.WarnContext(ctx, "result of a failed publish not kept; the command's next delivery runs the program again",
			"execution_id", cmd.ExecutionId, "step_id", cmd.StepId, "err", err)
	}
}

// keepTimeout bounds keeping a result after its publish failed.
const keepTimeout = 5 * time.Second

// fit makes res fit one message of the bus: the JavaScript value it
// carries besides its updates goes, then the largest context values go to
// the value store. A result that still does not fit becomes a failed run
// naming its size, the limit and what the node can do.
func (s *server) fit(ctx context.Context, res *novav1.CodeExecuted) error {
	limit := int(s.Bus.MaxPayload()) - messageHeadroom
	if limit <= 0 {
		return nil
	}
	size := proto.Size(res)
	if size <= limit {
		return nil
	}
	if res.Result != nil || res.Items != nil {
		// The value reaches the context through the updates too.
		res.Result, res.Items = nil, nil
		if size = proto.Size(res); size <= limit {
			return nil
		}
	}
	updates, err := jsonvalue.FromProto(res.ContextUpdates)
	if err != nil || len(updates) == 0 || s.Values == nil {
		return s.tooLarge(res, size, limit, updates)
	}
	rest := size - len(res.ContextUpdates.GetRaw())
	if _, err := s.Values.ShrinkTo(ctx, updates, limit-rest); err != nil {
		return fmt.Errorf("store large results: %w", err)
	}
	res.ContextUpdates = updates.Proto()
	if size = proto.Size(res); size <= limit {
		return nil
	}
	return s.tooLarge(res, size, limit, updates)
}

// tooLarge turns res into a failed run of a result that cannot be carried.
func (s *server) tooLarge(res *novav1.CodeExecuted, size, limit int, updates jsonvalue.Object) error {
	refs := 0
	for _, raw := range updates {
		if _, ok := valueref.RawRef(raw); ok {
			refs++
		}
	}
	out := &novav1.CodeExecuted{ExecutionId: res.ExecutionId, NodeId: res.NodeId, StepId: res.StepId, Visit: res.Visit,
		Attempt: res.Attempt, StepNumber: res.StepNumber, Sequence: res.Sequence, DurationMs: res.DurationMs, SandboxId: res.SandboxId,
		Status: runner.StatusError, ErrorKind: runner.KindLimit, Limit: LimitResultSize,
		Stdout: truncate(res.Stdout, 4<<10), Stderr: truncate(res.Stderr, 4<<10),
		Error: fmt.Sprintf("the program's result is %d bytes, more than the %d bytes one message on the bus carries, "+
			"though %d of its %d context keys went to the value store: it sets too many keys. "+
			"Put many small values under one key (a list or an object), which is stored by reference when large",
			size, limit, refs, len(updates))}
	proto.Reset(res)
	proto.Merge(res, out)
	return nil
}

// LimitResultSize names the limit of a result too large to carry.
const LimitResultSize = "result_size"
