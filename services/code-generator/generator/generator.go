// Package generator is NOVA's code-generator agent: from a node's task, a
// summary of its context, the data insights and the errors of earlier
// attempts, it asks a model for the Python of the analysis or task stage.
// The model may read the sandbox runtime's documentation through the tool
// search_documentation. Prompts never carry secrets or large values: the
// context is described (keys, types, sizes, short samples), never sent.
//
// The REFINE stage (the field-feedback refinement, for the gateway's
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

// start declares the agent's consumer and returns the service that
// answers its commands.
func start(ctx context.Context, d Deps) (*agent.Service, error) {
	if d.Bus == nil {
		return nil, errors.New("generator: a bus is required")
	}
	if d.TracerProvider == nil {
		d.TracerProvider = noop.NewTracerProvider()
	}
	g, err := New(d)
	if err != nil {
		return nil, err
	}
	// Load the documentation now so the first command does not wait for it;
	// a sandbox that starts later is picked up on demand.
	g.docs.get(ctx)
	spec := Spec
	spec.Workers = d.Workers
	return agent.Start(ctx, d.Bus, d.TracerProvider, spec,
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
	gen := &generation{
		g:        g,
		cmd:      cmd,
		start:    time.Now(),
		res:      &novav1.CodeGenerated{Ref: cmd.GetRef(), Outcome: &novav1.AgentOutcome{Status: "success"}},
		stage:    requestedStage(cmd),
		language: LanguagePython,
	}
	var p prompt
	var problem string
	if gen.stage == StageRefine {
		p, problem = gen.refinePrompt(ctx)
	} else {
		p, problem = gen.taskPrompt(ctx)
	}
	if problem != "" {
		return gen.fail(problem), nil
	}
	gen.model = cmd.GetSpec().GetModel()
	if gen.model == "" {
		gen.model = g.defaultModel
	}
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: redact.Scrub(p.system, p.secrets)},
		{Role: openai.ChatMessageRoleUser, Content: redact.Scrub(p.user, p.secrets)},
	}
	var tools []llm.Tool
	if p.offerDocs {
		tools = append(tools, gen.docsTool())
	}
	problem, err := gen.askForCode(ctx, msgs, tools)
	switch {
	case err != nil:
		return gen.modelFailed(ctx, err)
	case problem != "":
		return gen.fail(problem), nil
	}
	gen.finish(ctx)
	return gen.res, nil
}

// generation is the state of one Generate call: the command, the result it
// builds, and the stage, language and model it writes with.
type generation struct {
	g        *Generator
	cmd      *novav1.GenerateCode
	start    time.Time
	res      *novav1.CodeGenerated
	stage    string
	language string
	model    string
}

// prompt is what the model is asked, and the secret values to scrub from it.
type prompt struct {
	system, user string
	secrets      []string
	// offerDocs offers the tool search_documentation (the Python runtime's).
	offerDocs bool
}

// fail reports msg as the outcome's error.
func (gen *generation) fail(msg string) *novav1.CodeGenerated {
	gen.res.Outcome.Status = "error"
	gen.res.Outcome.Error = msg
	gen.res.Outcome.DurationMs = ms(time.Since(gen.start))
	return gen.res
}

// refinePrompt asks to improve code that ran, from feedback on its output;
// problem says why the command cannot be answered.
func (gen *generation) refinePrompt(ctx context.Context) (p prompt, problem string) {
	spec, r := gen.cmd.GetSpec(), gen.cmd.GetRefinement()
	p.offerDocs = true
	switch strings.ToLower(spec.GetLanguage()) {
	case "", "python", "python3":
	case LanguageJavaScript, "js":
		gen.language, p.offerDocs = LanguageJavaScript, false // the documentation is the Python runtime's
	default:
		return p, fmt.Sprintf("the code generator refines Python or JavaScript; language %q is not supported", spec.GetLanguage())
	}
	if strings.TrimSpace(r.GetOriginalCode()) == "" || len(r.GetFeedback()) == 0 {
		return p, "a refinement needs the original code and feedback on at least one field"
	}
	in := refineInput{cmd: gen.cmd, language: gen.language, context: jsonvalue.Map(r.GetTestContext()), docs: p.offerDocs}
	if p.offerDocs {
		in.libraries = gen.g.docs.libraries(ctx)
	}
	in.secrets = redact.SecretValues(map[string]any{"context": in.context})
	p.secrets = in.secrets
	p.system, p.user = buildRefinePrompt(in)
	return p, ""
}

// taskPrompt asks for the Python of the node's task at the requested stage;
// problem says why the command cannot be answered.
func (gen *generation) taskPrompt(ctx context.Context) (p prompt, problem string) {
	spec := gen.cmd.GetSpec()
	if strings.TrimSpace(spec.GetTask()) == "" {
		return p, "the node has no task (prompt) to write code for"
	}
	switch strings.ToLower(spec.GetLanguage()) {
	case "", "python", "python3":
	default:
		return p, fmt.Sprintf("the code generator writes Python; language %q is not supported", spec.GetLanguage())
	}
	in := promptInput{
		cmd:       gen.cmd,
		context:   jsonvalue.Map(gen.cmd.GetContext()),
		insights:  jsonvalue.Map(gen.cmd.GetDataInsights()),
		libraries: gen.g.docs.libraries(ctx),
		docs:      true,
	}
	in.secrets = redact.SecretValues(map[string]any{"context": in.context, "insights": in.insights})
	p.secrets = in.secrets
	p.system, p.user = buildPrompt(in)
	p.offerDocs = true
	return p, ""
}

// docsTool is search_documentation, its answers counted in prompt_bytes:
// that counts every message the generator adds to the conversation once,
// its own prompts and the tool's answers.
func (gen *generation) docsTool() llm.Tool {
	tool := gen.g.docs.tool()
	search := tool.Handle
	tool.Handle = func(ctx context.Context, args string) (string, error) {
		answer, err := search(ctx, args)
		gen.res.PromptBytes += int64(len(answer))
		return answer, err
	}
	return tool
}

// askForCode asks the model for the code, and once more, with a correction,
// when its answer holds none. err is the model call's failure; problem says
// why there is no code otherwise.
func (gen *generation) askForCode(ctx context.Context, msgs []openai.ChatCompletionMessage, tools []llm.Tool) (problem string, err error) {
	res := gen.res
	temperature := float32(0.2) // focused code; reasoning models ignore it
	sent := 0
	for try := 1; ; try++ {
		res.PromptBytes += messageBytes(msgs[sent:])
		sent = len(msgs)
		resp, err := gen.g.llm.Chat(ctx, llm.Request{
			Model:       gen.model,
			Messages:    msgs,
			Tools:       tools,
			MaxTokens:   maxTokens(gen.model),
			Temperature: &temperature,
		})
		if resp != nil {
			res.Outcome.ModelCalls = append(res.Outcome.ModelCalls, resp.Calls...)
			res.ToolCalls = append(res.ToolCalls, resp.ToolCalls...)
		}
		if err != nil {
			return "", err
		}
		answer := resp.Content
		if res.Code = extractCodeIn(answer, gen.language); res.Code != "" {
			return "", nil
		}
		if try == 2 {
			return fmt.Sprintf("model %s answered no %s code, also when asked again; last answer: %q",
				gen.model, languageName(gen.language), shortenHead(strings.TrimSpace(answer), 300)), nil
		}
		gen.g.log.WarnContext(ctx, "model answered no code, asking again", "model", gen.model)
		msgs = append(msgs,
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: answer},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: correction(gen.stage, gen.language)})
	}
}

// modelFailed answers a failed model call: redelivery when the context
// ended, the budget's refusal, or a failed outcome.
func (gen *generation) modelFailed(ctx context.Context, err error) (*novav1.CodeGenerated, error) {
	if ctx.Err() != nil {
		return nil, err
	}
	if agent.BudgetRefused(gen.res.Outcome, err) {
		gen.res.Outcome.DurationMs = ms(time.Since(gen.start))
		return gen.res, nil
	}
	gen.g.log.WarnContext(ctx, "model call failed", "model", gen.model, "err", err)
	return gen.fail(fmt.Sprintf("model %s failed: %v", gen.model, err)), nil
}

// finish completes a result with code: its stage, duration, span attributes
// and log line.
func (gen *generation) finish(ctx context.Context) {
	res, cmd := gen.res, gen.cmd
	if gen.stage == StageRefine {
		res.Stage = StageRefine
	} else {
		res.Stage = detectStage(res.Code)
	}
	res.Outcome.DurationMs = ms(time.Since(gen.start))

	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("llm.model", gen.model),
		attribute.String("code.stage", res.Stage),
		attribute.Int64("llm.prompt_bytes", res.PromptBytes),
		attribute.Int("llm.calls", len(res.Outcome.ModelCalls)),
		attribute.Int("llm.tool_calls", len(res.ToolCalls)))
	gen.g.log.InfoContext(ctx, "code generated",
		"execution_id", cmd.GetRef().GetExecutionId(), "node_id", cmd.GetRef().GetNodeId(),
		"attempt", cmd.GetRef().GetAttempt(), "model", gen.model, "requested_stage", gen.stage, "stage", res.Stage,
		"model_calls", len(res.Outcome.ModelCalls), "tool_calls", len(res.ToolCalls), "prompt_bytes", res.PromptBytes)
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
