package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// ErrUnusableAnswer is returned by ChatJSON when the model's answer was still
// unusable after it had been told what was wrong.
var ErrUnusableAnswer = errors.New("the model's answer was unusable")

// DecodeJSON reads the JSON object in a model's answer into v. Models wrap
// JSON in ```json fences or put a sentence around it even in JSON mode, so
// both are tolerated; what follows the object is ignored.
func DecodeJSON(content string, v any) error {
	s := strings.TrimSpace(content)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		// Drop the fence line (with its language tag) and the closing fence.
		if _, body, ok := strings.Cut(rest, "\n"); ok {
			rest = body
		}
		if i := strings.LastIndex(rest, "```"); i >= 0 {
			rest = rest[:i]
		}
		s = strings.TrimSpace(rest)
	}
	start := strings.IndexByte(s, '{')
	if start < 0 {
		if s == "" {
			return errors.New("the answer is empty")
		}
		return fmt.Errorf("the answer holds no JSON object: %q", shorten(s, 120))
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s[start:])))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the answer is not a valid JSON object: %w", err)
	}
	return nil
}

// ChatJSON asks for a JSON object (req.JSON is set) and passes the answer to
// accept, which decodes and checks it. When accept rejects an answer the
// model is shown its answer and accept's error and asked once more. The
// Response holds every call made; when the second answer is unusable too the
// error wraps ErrUnusableAnswer and accept's last error.
func (c *Client) ChatJSON(ctx context.Context, req Request, accept func(content string) error) (*Response, error) {
	req.JSON = true
	msgs := append([]openai.ChatCompletionMessage(nil), req.Messages...)
	total := &Response{}
	var problem error
	for try := 0; try < 2; try++ {
		req.Messages = msgs
		res, err := c.Chat(ctx, req)
		if res != nil {
			total.Calls = append(total.Calls, res.Calls...)
			total.ToolCalls = append(total.ToolCalls, res.ToolCalls...)
			total.Scripted = total.Scripted || res.Scripted
		}
		if err != nil {
			return total, err
		}
		total.Content = res.Content
		if problem = accept(res.Content); problem == nil {
			return total, nil
		}
		said := shorten(res.Content, 2000)
		if strings.TrimSpace(said) == "" {
			said = "(an empty answer)" // an assistant message needs content
		}
		msgs = append(msgs,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: said},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Your answer could not be used: " +
				problem.Error() + ". Answer again with only the JSON object described above, with every field and the right types."})
	}
	return total, fmt.Errorf("%w: %w", ErrUnusableAnswer, problem)
}
