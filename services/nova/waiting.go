package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// waitNotice says, for nova run, that execution id waits at a wait node:
// for which signal, until when, what the people asked are told, and the
// exact nova signal command that sends it, with a payload that meets the
// node's schema. natsEnv is the NATS_URL=... prefix that command needs
// ("" when the shell has NATS_URL already); runFor is how long nova run
// itself waits for the end.
func waitNotice(w io.Writer, id string, def *novav1.WorkflowDefinition, nw *novav1.NodeWaiting, natsEnv string, runFor time.Duration) {
	until := "for ever (the node has no timeout)"
	if u := nw.GetUntil(); u != nil {
		t := u.AsTime()
		until = fmt.Sprintf("until %s (in %s)", t.Local().Format(time.RFC3339), time.Until(t).Round(time.Second))
	}
	fmt.Fprintf(w, "nova run: execution %s waits at node %s for signal %q %s\n", id, nw.GetNodeId(), nw.GetSignal(), until)
	if d := strings.TrimSpace(nw.GetDescription()); d != "" {
		fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(d, "\n", "\n  "))
	}
	node := nodeOf(def, nw.GetNodeId())
	payload := examplePayload(node, nw.GetSchema(), nw.GetDecideOn())
	cmd := fmt.Sprintf("nova signal %s %s", id, nw.GetSignal())
	if payload != "" {
		cmd += " --data '" + payload + "'"
	}
	if natsEnv != "" {
		cmd = natsEnv + " " + cmd
	}
	fmt.Fprintf(w, "  send it from another terminal with:\n    %s\n", cmd)
	if s := strings.TrimSpace(nw.GetSchema()); s != "" {
		fmt.Fprintf(w, "  (the payload's schema: %s)\n", compactJSON(s))
	}
	fmt.Fprintf(w, "  nova run waits for the end at most --timeout (%s); the execution stops with it\n", runFor)
}

// examplePayload is a payload, as compact JSON, that meets a wait node's
// schema: each required property (else the decide_on one) with a value of
// its type (an enum's first value, true, 1, "text"); "" when the schema
// asks for nothing, or when the example would not meet it.
func examplePayload(node *novav1.Node, schemaText, decideOn string) string {
	if strings.TrimSpace(schemaText) == "" {
		if decideOn == "" {
			return ""
		}
		return fmt.Sprintf(`{%q: true}`, decideOn)
	}
	var schema struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal([]byte(schemaText), &schema) != nil {
		return ""
	}
	keys := slices.Clone(schema.Required)
	if len(keys) == 0 && decideOn != "" {
		keys = []string{decideOn}
	}
	if len(keys) == 0 {
		return ""
	}
	example := map[string]any{}
	for _, k := range keys {
		example[k] = exampleValue(schema.Properties[k])
	}
	text, err := json.Marshal(example)
	if err != nil {
		return ""
	}
	if node != nil {
		obj, err := jsonvalue.ParseObject(text)
		if err != nil {
			return ""
		}
		decoded, err := obj.Decoded()
		if err != nil || workflow.CheckPayload(node, decoded) != nil {
			return ""
		}
	}
	return string(text)
}

// exampleValue is a value of a property's schema.
func exampleValue(raw json.RawMessage) any {
	var p struct {
		Type    any      `json:"type"`
		Enum    []any    `json:"enum"`
		Const   any      `json:"const"`
		Minimum *float64 `json:"minimum"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return "text"
	}
	if p.Const != nil {
		return p.Const
	}
	if len(p.Enum) > 0 {
		return p.Enum[0]
	}
	typ, _ := p.Type.(string)
	if list, ok := p.Type.([]any); ok && len(list) > 0 {
		typ, _ = list[0].(string)
	}
	switch typ {
	case "boolean":
		return true
	case "integer", "number":
		if p.Minimum != nil {
			return *p.Minimum
		}
		return 1
	case "object":
		return map[string]any{}
	case "array":
		return []any{}
	case "null":
		return nil
	}
	return "text"
}

// compactJSON is JSON text on one line (text as it is when it is no JSON).
func compactJSON(text string) string {
	var v any
	if json.Unmarshal([]byte(text), &v) != nil {
		return text
	}
	out, err := json.Marshal(v)
	if err != nil {
		return text
	}
	return string(out)
}
