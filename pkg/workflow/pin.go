package workflow

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ErrNotRunnable is returned by PinCode for a node that is not an action or
// decision node: one that runs nothing (a start, end, wait, sleep or join
// node), or a map or workflow node.
var ErrNotRunnable = errors.New("node runs no code")

// PinCode returns a copy of def in which node nodeID runs code, in language
// (python or javascript; empty keeps the node's language), as written. A
// proven AI node becomes a code node this way, so that later runs call no
// model: its prompt is kept in the node's description and as a comment at
// the top of the code, for whoever reads either. A code node gets the new
// code. def itself is left as it was.
//
// The errors wrap ErrUnknownNode (no such node), ErrNotRunnable (neither
// an action nor a decision node), or describe code or a language that
// cannot be pinned; a definition that is no longer valid afterwards is a
// *ValidationError.
func PinCode(def *novav1.WorkflowDefinition, nodeID, code, language string) (*novav1.WorkflowDefinition, error) {
	if def == nil {
		return nil, errors.New("pin code: no workflow definition")
	}
	out := proto.Clone(def).(*novav1.WorkflowDefinition)
	var node *novav1.Node
	for _, n := range out.GetNodes() {
		if n.GetId() == nodeID {
			node = n
			break
		}
	}
	if node == nil {
		return nil, fmt.Errorf("pin code: workflow %q has no node %q: %w", def.GetName(), nodeID, ErrUnknownNode)
	}
	switch node.GetType() {
	case novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_DECISION:
	default:
		return nil, fmt.Errorf("pin code: node %q is %s node: %w", nodeID, withArticle(node.GetType()), ErrNotRunnable)
	}
	if strings.TrimSpace(code) == "" {
		return nil, errors.New("pin code: the code is empty")
	}
	language = strings.ToLower(strings.TrimSpace(language))
	if language == "" {
		language = node.GetLanguage()
	}
	switch language {
	case "", "python", "javascript":
	default:
		return nil, fmt.Errorf("pin code: language must be python or javascript, got %q", language)
	}
	if prompt := strings.TrimSpace(node.GetPrompt()); prompt != "" {
		code = promptComment(prompt, language) + code
		if d := strings.TrimSpace(node.GetDescription()); d != "" && d != prompt {
			node.Description = d + "\n\n" + prompt
		} else {
			node.Description = prompt
		}
		node.Prompt = ""
	}
	node.Code = code
	node.Language = language
	if err := Validate(out, ValidateOptions{AllowPrompt: true}); err != nil {
		return nil, err
	}
	return out, nil
}

// promptComment is the AI task as a comment block of the code's language.
func promptComment(prompt, language string) string {
	mark := "#"
	if language == "javascript" {
		mark = "//"
	}
	var b strings.Builder
	b.WriteString(mark + " Pinned from an AI node; its task (prompt) was:\n")
	for _, line := range strings.Split(prompt, "\n") {
		b.WriteString(strings.TrimRight(mark+" "+line, " ") + "\n")
	}
	return b.String()
}
