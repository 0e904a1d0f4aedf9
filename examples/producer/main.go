// Command producer starts a NOVA workflow from outside NOVA and waits for its
// result, speaking only the documented contract: a CloudEvent in binary mode
// over NATS headers on nova.cmd.graph-engine, and the completion event on
// nova.evt.<execution_id>.workflow.completed.
//
//	go run . -nats nats://127.0.0.1:4222
//
// It needs a running NOVA (for example `nova dev`).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const (
	startSubject  = "nova.cmd.graph-engine"
	startType     = "io.nova.workflow.start.v1"
	completedType = "io.nova.workflow.completed.v1"
	eventsStream  = "NOVA_EVT"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	url := flag.String("nats", envOr("NATS_URL", nats.DefaultURL), "NATS server URL")
	name := flag.String("workflow", "", "start this registered workflow instead of the inline example")
	who := flag.String("name", "Ada", "initial context value of \"name\"")
	timeout := flag.Duration("timeout", time.Minute, "how long to wait for the result")
	user := flag.String("user", os.Getenv("NATS_USER"), "NATS user (deploy/nats: nova)")
	password := flag.String("password", os.Getenv("NATS_PASSWORD"), "NATS password")
	inbox := flag.String("inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"), "reply inbox prefix; with deploy/nats users: _INBOX.<user>")
	flag.Parse()

	opts := []nats.Option{nats.Name("example-producer")}
	if *user != "" {
		opts = append(opts, nats.UserInfo(*user, *password))
	}
	if *inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(*inbox))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *url, err)
	}
	defer nc.Drain()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	executionID := uuid.NewString()
	data, err := startWorkflowJSON(executionID, *name, *who)
	if err != nil {
		return err
	}

	// Watch for the completion before publishing the start. The events stream
	// keeps the completion, so an ordered consumer from the beginning of the
	// stream cannot miss it.
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	completion, err := js.OrderedConsumer(ctx, eventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"nova.evt." + executionID + ".workflow.completed"},
	})
	if err != nil {
		return fmt.Errorf("watch completion: %w", err)
	}

	ev, err := startEvent(executionID, data)
	if err != nil {
		return err
	}
	msg := natsMessage(ev, executionID)
	// The server refuses a message over its max_payload (1 MiB by default)
	// with only "maximum payload exceeded": say what the limit is first.
	if size := len(msg.Data); int64(size) > nc.MaxPayload() {
		return fmt.Errorf("the start event's data is %d bytes; the NATS server takes at most %d bytes a message (max_payload): "+
			"pass large values as {\"$ref\": ...} of NOVA's value store (POST /v1/executions and nova run store them there)", size, nc.MaxPayload())
	}
	// Nats-Msg-Id = event id: publishing the same event again (a retry after
	// a lost acknowledgement) starts the workflow once.
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID())); err != nil {
		return fmt.Errorf("publish start: %w", err)
	}
	fmt.Fprintf(os.Stderr, "started execution %s\n", executionID)

	done, err := awaitCompletion(ctx, completion, executionID, *timeout)
	if err != nil {
		return err
	}
	return printCompletion(done)
}

// startWorkflowJSON is the StartWorkflow message (proto/nova/v1/events.proto)
// in its JSON form: an inline definition (or the name of a registered one)
// and the initial context, which is plain JSON whose numbers reach every
// node exactly as written here.
func startWorkflowJSON(executionID, workflowName, who string) ([]byte, error) {
	start := startWorkflow{ExecutionID: executionID, WorkflowName: workflowName}
	if workflowName == "" {
		def, err := protojson.Marshal(greeting())
		if err != nil {
			return nil, err
		}
		start.Definition = def
	}
	var err error
	if start.Context, err = json.Marshal(map[string]any{"name": who}); err != nil {
		return nil, err
	}
	return json.Marshal(start)
}

// startEvent is the CloudEvent that starts execution executionID with the
// StartWorkflow JSON data.
func startEvent(executionID string, data []byte) (*event.Event, error) {
	ev := event.New() // specversion 1.0
	ev.SetID(uuid.NewString())
	ev.SetSource("example/producer")
	ev.SetType(startType)
	ev.SetTime(time.Now().UTC())
	ev.SetDataSchema("proto:nova.v1.StartWorkflow")
	// The executionid extension lets the engine report even a start event
	// whose data it cannot read as a failed execution.
	ev.SetExtension("executionid", executionID)
	if err := ev.SetData(event.ApplicationJSON, data); err != nil {
		return nil, err
	}
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	return &ev, nil
}

// natsMessage is ev in binary content mode: every context attribute
// travels as a ce-* header, the data as the message body.
func natsMessage(ev *event.Event, executionID string) *nats.Msg {
	msg := nats.NewMsg(startSubject)
	msg.Header.Set("ce-specversion", ev.SpecVersion())
	msg.Header.Set("ce-id", ev.ID())
	msg.Header.Set("ce-source", ev.Source())
	msg.Header.Set("ce-type", ev.Type())
	msg.Header.Set("ce-time", ev.Time().Format(time.RFC3339Nano))
	msg.Header.Set("ce-dataschema", ev.DataSchema())
	msg.Header.Set("ce-executionid", executionID)
	msg.Header.Set("content-type", ev.DataContentType())
	msg.Data = ev.Data()
	return msg
}

// awaitCompletion waits for execution executionID's completion event on
// completion; ctx ends after timeout, which the error then names.
func awaitCompletion(ctx context.Context, completion jetstream.Consumer, executionID string, timeout time.Duration) (*workflowCompleted, error) {
	m, err := completion.Next(jetstream.FetchContext(ctx))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("no completion of %s within %s", executionID, timeout)
		}
		return nil, fmt.Errorf("wait for completion: %w", err)
	}
	if t := m.Headers().Get("ce-type"); t != completedType {
		return nil, fmt.Errorf("unexpected event type %q", t)
	}
	var done workflowCompleted
	if err := json.Unmarshal(m.Data(), &done); err != nil {
		return nil, fmt.Errorf("decode completion: %w", err)
	}
	return &done, nil
}

// printCompletion prints the result as JSON; an execution that did not
// succeed is an error.
func printCompletion(done *workflowCompleted) error {
	out, _ := json.MarshalIndent(map[string]any{
		"execution_id": done.ExecutionID,
		"status":       done.Status,
		"path":         done.Path,
		"context":      done.Context,
		"error":        done.Error,
	}, "", "  ")
	fmt.Println(string(out))
	if done.Status != "succeeded" {
		return fmt.Errorf("execution %s %s: %s", done.ExecutionID, done.Status, done.Error)
	}
	return nil
}

// greeting is a three-node workflow: start -> greet (Python) -> end.
// startWorkflow is the JSON of nova.v1.StartWorkflow (field names in
// lowerCamelCase, as protojson writes them). The context is any JSON object.
type startWorkflow struct {
	ExecutionID  string          `json:"executionId"`
	WorkflowName string          `json:"workflowName,omitempty"`
	Definition   json.RawMessage `json:"definition,omitempty"`
	Context      json.RawMessage `json:"context"`
}

// workflowCompleted is the part of nova.v1.WorkflowCompleted this producer
// prints. json.RawMessage keeps the context's numbers as they were written.
type workflowCompleted struct {
	ExecutionID string          `json:"executionId"`
	Status      string          `json:"status"`
	Context     json.RawMessage `json:"context"`
	Path        []string        `json:"path"`
	Error       string          `json:"error"`
}

func greeting() *novav1.WorkflowDefinition {
	return &novav1.WorkflowDefinition{
		Name: "greeting",
		Nodes: []*novav1.Node{
			{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
			{Id: "greet", Type: novav1.NodeType_NODE_TYPE_ACTION,
				Code: `context["greeting"] = "Hello, " + context.get("name", "world") + "!"`},
			{Id: "end", Type: novav1.NodeType_NODE_TYPE_END},
		},
		Edges: []*novav1.Edge{{From: "start", To: "greet"}, {From: "greet", To: "end"}},
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
