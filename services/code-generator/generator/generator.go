// Package generator is NOVA's code-generator agent: from a node's task, a
// summary of its context, the data insights and the errors of earlier
// attempts, it asks a model for the Python of the analysis or task stage.
// The model may read the sandbox runtime's documentation through the tool
// search_documentation. Prompts never carry secrets or large values: the
// context is described (keys, types, sizes, short samples), never sent.
//
// The REFINE stage (seed 004's field-feedback loop, for the gateway's
// POST /v1/refine) improves code that already ran, in Python or
// JavaScript, from feedback on the fields of its output; see refineprompt.go.
package generator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultModel writes code when neither the node nor the workflow names a
// model: generation needs a strong one.
const DefaultModel = "gpt-4o"

// Spec is the agent's queue and events.
var Spec = agent.Spec{
	Name:        bus.AgentCodeGenerator,
	Verb:        "generate",
	CommandType: bus.TypeCodeGenerate,
	ResultType:  bus.TypeCodeGenerated,
	// Model calls with tool rounds can take minutes; in-progress acks keep
	// the delivery meanwhile, and a replica that stops gives it back after
	// bus.DefaultAckWait.
}

// Deps are what the generator needs.
type Deps struct {
	// Bus is required by Run; Generate only uses its JetStream to load the
	// runtime documentation when Runtime is nil.
	Bus            *bus.Bus
	LLM            *llm.Client
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// DefaultModel is used when the command names none (default "gpt-4o").
	DefaultModel string
	// Workers is how many commands this replica handles at once.
	Workers int
	// Runtime is the sandbox runtime's documentation index; nil loads it
	// from the object store the sandbox publishes it to.
	Runtime *runtimeinfo.Info
}

// Generator writes code for GenerateCode commands.
type Generator struct {
	llm          *llm.Client
	log          *slog.Logger
	defaultModel string
	docs         *runtimeDocs
}

// New builds a generator.
func New(d Deps) (*Generator, error) {
	if d.LLM == nil {
		return nil, errors.New("generator: an LLM client is required")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.DefaultModel == "" {
		d.DefaultModel = DefaultModel
	}
	var js jetstream.JetStream
	if d.Bus != nil {
		js = d.Bus.JetStream()
	}
	return &Generator{
		llm:          d.LLM,
		log:          d.Logger,
		defaultModel: d.DefaultModel,
		docs:         newRuntimeDocs(js, d.Runtime, d.Logger),
	}, nil
}

// Run serves GenerateCode commands until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if d.Bus == nil {
		return errors.New("generator: a bus is required")
	}
	if d.TracerProvider == nil {
		d.TracerProvider = noop.NewTracerProvider()
	}
	g, err := New(d)
	if err != nil {
		return err
	}
	// Load the documentation now so the first command does not wait for it;
	// a sandbox that starts later is picked up on demand.
	g.docs.get(ctx)
	spec := Spec
	spec.Workers = d.Workers
	return agent.Serve(ctx, d.Bus, d.TracerProvider, spec,
		func() *novav1.GenerateCode { return &novav1.GenerateCode{} },
		func(ctx context.Context, cmd *novav1.GenerateCode) (proto.Message, error) {
			return g.Generate(ctx, cmd)
		})
}

// Generate answers one command. The model failing (no code after a
// corrective retry, an API error that retries could not overcome) is
// reported in the outcome, for the engine to count as a failed attempt;
// the returned error is only for work this replica could not do (the
// context ended), so the command is redelivered.
func (g *Generator) Generate(ctx context.Context, cmd *novav1.GenerateCode) (*novav1.CodeGenerated, error) {
	start := time.Now()
	res := &novav1.CodeGenerated{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}}
	fail := func(msg string) *novav1.CodeGenerated {
		res.Outcome.Status = "error"
		res.Outcome.Error = msg
		res.Outcome.DurationMs = ms(time.Since(start))
		return res
	}
	spec := cmd.GetSpec()
	stage := requestedStage(cmd)
	language := LanguagePython
	var system, user string
	var secrets []string
	offerDocs := true
	if stage == StageRefine {
		r := cmd.GetRefinement()
		switch strings.ToLower(spec.GetLanguage()) {
		case "", "python", "python3":
		case LanguageJavaScript, "js":
			language, offerDocs = LanguageJavaScript, false // the documentation is the Python runtime's
		default:
			return fail(fmt.Sprintf("the code generator refines Python or JavaScript; language %q is not supported", spec.GetLanguage())), nil
		}
		if strings.TrimSpace(r.GetOriginalCode()) == "" || len(r.GetFeedback()) == 0 {
			return fail("a refinement needs the original code and feedback on at least one field"), nil
		}
		in := refineInput{cmd: cmd, language: language, context: jsonvalue.Map(r.GetTestContext()), docs: offerDocs}
		if offerDocs {
			in.libraries = g.docs.libraries(ctx)
		}
		in.secrets = redact.SecretValues(map[string]any{"context": in.context})
		secrets = in.secrets
		system, user = buildRefinePrompt(in)
	} else {
		if strings.TrimSpace(spec.GetTask()) == "" {
			return fail("the node has no task (prompt) to write code for"), nil
		}
		switch strings.ToLower(spec.GetLanguage()) {
		case "", "python", "python3":
		default:
			return fail(fmt.Sprintf("the code generator writes Python; language %q is not supported", spec.GetLanguage())), nil
		}
		in := promptInput{
			cmd:       cmd,
			context:   jsonvalue.Map(cmd.GetContext()),
			insights:  jsonvalue.Map(cmd.GetDataInsights()),
			libraries: g.docs.libraries(ctx),
			docs:      true,
		}
		in.secrets = redact.SecretValues(map[string]any{"context": in.context, "insights": in.insights})
		secrets = in.secrets
		system, user = buildPrompt(in)
	}
	model := spec.GetModel()
	if model == "" {
		model = g.defaultModel
	}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: redact.Scrub(system, secrets)},
		{Role: openai.ChatMessageRoleUser, Content: redact.Scrub(user, secrets)},
	}

	// prompt_bytes counts every message the generator adds to the
	// conversation once: its own prompts and the tool's answers.
	var tools []llm.Tool
	if offerDocs {
		tool := g.docs.tool()
		search := tool.Handle
		tool.Handle = func(ctx context.Context, args string) (string, error) {
			answer, err := search(ctx, args)
			res.PromptBytes += int64(len(answer))
			return answer, err
		}
		tools = append(tools, tool)
	}
	temperature := float32(0.2) // focused code; reasoning models ignore it
	sent := 0
	var answer string
	for try := 1; ; try++ {
		res.PromptBytes += messageBytes(msgs[sent:])
		sent = len(msgs)
		resp, err := g.llm.Chat(ctx, llm.Request{
			Model:       model,
			Messages:    msgs,
			Tools:       tools,
			MaxTokens:   maxTokens(model),
			Temperature: &temperature,
		})
		if resp != nil {
			res.Outcome.ModelCalls = append(res.Outcome.ModelCalls, resp.Calls...)
			res.ToolCalls = append(res.ToolCalls, resp.ToolCalls...)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if agent.BudgetRefused(res.Outcome, err) {
				res.Outcome.DurationMs = ms(time.Since(start))
				return res, nil
			}
			g.log.WarnContext(ctx, "model call failed", "model", model, "err", err)
			return fail(fmt.Sprintf("model %s failed: %v", model, err)), nil
		}
		answer = resp.Content
		if res.Code = extractCodeIn(answer, language); res.Code != "" {
			break
		}
		if try == 2 {
			return fail(fmt.Sprintf("model %s answered no %s code, also when asked again; last answer: %q",
				model, languageName(language), shortenHead(strings.TrimSpace(answer), 300))), nil
		}
		g.log.WarnContext(ctx, "model answered no code, asking again", "model", model)
		msgs = append(msgs,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: answer},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: correction(stage, language)})
	}
	if stage == StageRefine {
		res.Stage = StageRefine
	} else {
		res.Stage = detectStage(res.Code)
	}
	res.Outcome.DurationMs = ms(time.Since(start))

	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("llm.model", model),
		attribute.String("code.stage", res.Stage),
		attribute.Int64("llm.prompt_bytes", res.PromptBytes),
		attribute.Int("llm.calls", len(res.Outcome.ModelCalls)),
		attribute.Int("llm.tool_calls", len(res.ToolCalls)))
	g.log.InfoContext(ctx, "code generated",
		"execution_id", cmd.GetRef().GetExecutionId(), "node_id", cmd.GetRef().GetNodeId(),
		"attempt", cmd.GetRef().GetAttempt(), "model", model, "requested_stage", stage, "stage", res.Stage,
		"model_calls", len(res.Outcome.ModelCalls), "tool_calls", len(res.ToolCalls), "prompt_bytes", res.PromptBytes)
	return res, nil
}

// correction asks again after an answer without code.
func correction(stage, language string) string {
	if stage == StageRefine {
		return fmt.Sprintf("Your answer contained no %s code. Answer again with ONLY the complete improved code, in one ```%s block.",
			languageName(language), fence(language))
	}
	return "Your answer contained no Python code. Answer again with ONLY the Python code for the task, in one ```python block, " +
		"starting with the line `" + StageMarker(stage) + "`."
}

func languageName(language string) string {
	if language == LanguageJavaScript {
		return "JavaScript"
	}
	return "Python"
}

// maxTokens bounds an answer; reasoning models spend part of it thinking.
func maxTokens(model string) int {
	if llm.IsReasoningModel(model) {
		return 32_000
	}
	return 8_000
}

func messageBytes(msgs []openai.ChatCompletionMessage) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Content))
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
