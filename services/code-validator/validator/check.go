package validator

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/runtimeinfo"
)

//go:embed checker.py
var checkerScript string

// Rule ids of findings.
const (
	RuleSyntax            = "syntax"
	RuleUndefinedName     = "undefined-name"
	RuleUnknownContextKey = "unknown-context-key"
	RuleForbiddenImport   = "forbidden-import"
	RuleMissingModule     = "missing-module"
	RuleNoBranchDecision  = "no-branch-decision"
	RuleBadBranchDecision = "bad-branch-decision"
	RuleTooLarge          = "too-large"
)

// Stages of generated code.
const (
	StageAnalysis = "ANALYSIS"
	StageTask     = "TASK"
)

// DefaultPython runs the checker.
const DefaultPython = "/usr/bin/python3"

// DefaultForbidden is what node code may not import or call. The sandbox
// contains whatever code does anyway; this list makes the model hear about it
// before a run is wasted: processes (subprocess, multiprocessing, pty,
// os.system and friends), raw sockets (HTTP goes through requests), native
// code (ctypes), signals and resource limits, and importlib, which would hide
// imports from this check. An entry matches the module and its submodules;
// a trailing "*" matches any name with that prefix (os.exec* is os.execv, ...).
var DefaultForbidden = []string{
	"subprocess", "_posixsubprocess", "multiprocessing", "pty",
	"socket", "_socket", "ctypes", "_ctypes", "signal", "resource", "importlib",
	"os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg",
	"os.exec*", "os.spawn*", "os.posix_spawn*",
}

// DefaultPrelude are the names the sandbox defines before node code runs.
var DefaultPrelude = []string{"context", "json", "math", "re", "datetime"}

// MaxCodeBytes is the largest program checked.
const MaxCodeBytes = 1 << 20

// checkTimeout bounds one checker run; parsing a megabyte takes well under a second.
const checkTimeout = 20 * time.Second

// Input is one program to check and what it will run against.
type Input struct {
	Code string
	// Stage is "ANALYSIS" or "TASK"; empty means the code's own marker
	// ("# STAGE: ANALYSIS"), TASK when it has none.
	Stage string
	// NodeType is "action" or "decision".
	NodeType string
	// DecisionValues are the values branch_decision may take.
	DecisionValues []string
	// ContextKeys are the keys of the context the code will get.
	ContextKeys []string
	// Language is "python" (or empty); code in any other language is not
	// checked (see IsPython).
	Language string

	// Python runs the checker (DefaultPython when empty).
	Python string
	// Forbidden replaces DefaultForbidden when not nil.
	Forbidden []string
	// Prelude replaces DefaultPrelude when not nil.
	Prelude []string
	// Runtime is the sandbox runtime's description; nil skips the
	// installed-module check.
	Runtime *runtimeinfo.Info
	// Memo, when set, remembers the checker's answers, so a program checked
	// again against the same input does not start python3 again.
	Memo *Memo
}

// Finding is one problem, worded for the model that wrote the code.
type Finding struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	// Line is 1-based; 0 when the finding is about the whole program.
	Line int `json:"line"`
}

// ErrChecker is returned when the checker itself could not run; the code
// was not judged.
var ErrChecker = errors.New("python checker failed")

type checkRequest struct {
	Code           string   `json:"code"`
	ContextKeys    []string `json:"context_keys"`
	Prelude        []string `json:"prelude"`
	CheckBranch    bool     `json:"check_branch"`
	DecisionValues []string `json:"decision_values"`
}

type checkResult struct {
	Findings []Finding `json:"findings"`
	Imports  []struct {
		Module string   `json:"module"`
		Line   int      `json:"line"`
		Level  int      `json:"level"`
		Names  []string `json:"names"`
	} `json:"imports"`
	Uses []struct {
		Name string `json:"name"`
		Line int    `json:"line"`
	} `json:"uses"`
}

var stageMarker = regexp.MustCompile(`(?m)^\s*#\s*STAGE:\s*(ANALYSIS|TASK)\b`)

// StageOf is the stage a program declares with its marker, TASK when none.
func StageOf(code string) string {
	if m := stageMarker.FindStringSubmatch(code); m != nil {
		return m[1]
	}
	return StageTask
}

// IsPython reports whether a node's language is checked: the checks are
// Python's; JavaScript is only checked by running it.
func IsPython(language string) bool {
	l := strings.ToLower(strings.TrimSpace(language))
	return l == "" || l == "python" || l == "python3"
}

// Check runs the static checks on in.Code, which is parsed and never run. It
// returns no findings for a program that passes, or in a language other than
// Python; an error (ErrChecker) only when the checks could not be made.
func Check(ctx context.Context, in Input) ([]Finding, error) {
	if !IsPython(in.Language) {
		return nil, nil
	}
	if len(in.Code) > MaxCodeBytes {
		return []Finding{{Rule: RuleTooLarge, Message: fmt.Sprintf(
			"the code is %d bytes; at most %d are accepted: keep data in the context, not in the code", len(in.Code), MaxCodeBytes)}}, nil
	}
	stage := strings.ToUpper(strings.TrimSpace(in.Stage))
	if stage == "" {
		stage = StageOf(in.Code)
	}
	prelude := in.Prelude
	if prelude == nil {
		prelude = DefaultPrelude
	}
	req := checkRequest{
		Code:           in.Code,
		ContextKeys:    nonNil(in.ContextKeys),
		Prelude:        prelude,
		CheckBranch:    in.NodeType == "decision" && stage == StageTask,
		DecisionValues: nonNil(in.DecisionValues),
	}
	res, err := check(ctx, in.Memo, cmp.Or(in.Python, DefaultPython), req)
	if err != nil {
		return nil, err
	}
	// A copy: the answer may be the memo's, and findings are added below.
	findings := slices.Clone(res.Findings)
	forbidden := in.Forbidden
	if forbidden == nil {
		forbidden = DefaultForbidden
	}
	reported := map[string]bool{}
	add := func(f Finding, key string) {
		if !reported[key] {
			reported[key] = true
			findings = append(findings, f)
		}
	}
	for _, imp := range res.Imports {
		if imp.Level > 0 {
			add(Finding{Rule: RuleMissingModule, Line: imp.Line, Message: fmt.Sprintf(
				"relative import `from %s%s import ...` (line %d) cannot work: node code is not part of a package; import modules by their full name",
				strings.Repeat(".", imp.Level), imp.Module, imp.Line)}, "rel:"+imp.Module)
			continue
		}
		names := []string{imp.Module}
		for _, n := range imp.Names {
			if n != "*" {
				names = append(names, imp.Module+"."+n)
			}
		}
		if name, entry := firstMatch(forbidden, names...); name != "" {
			add(Finding{Rule: RuleForbiddenImport, Line: imp.Line, Message: forbiddenMessage(name, imp.Line)}, "forbid:"+entry)
			continue
		}
		top, _, _ := strings.Cut(imp.Module, ".")
		if in.Runtime != nil && top != "__future__" && !in.Runtime.HasModule(top) {
			add(Finding{Rule: RuleMissingModule, Line: imp.Line, Message: missingMessage(in.Runtime, top, imp.Line)}, "missing:"+top)
		}
	}
	// Calls such as os.system(...); subprocess.run(...) after a reported
	// `import subprocess` is the same finding.
	for _, u := range res.Uses {
		if name, entry := firstMatch(forbidden, u.Name); name != "" {
			add(Finding{Rule: RuleForbiddenImport, Line: u.Line, Message: forbiddenMessage(name, u.Line)}, "forbid:"+entry)
		}
	}
	slices.SortStableFunc(findings, func(a, b Finding) int { return a.Line - b.Line })
	return findings, nil
}

// check is the checker's answer to req, from memo when it has it (memo may
// be nil). Only answers are remembered, never a checker that failed.
func check(ctx context.Context, memo *Memo, python string, req checkRequest) (*checkResult, error) {
	if memo == nil {
		return runChecker(ctx, python, req)
	}
	key, err := memoKey(python, req)
	if err != nil {
		return nil, err
	}
	if res := memo.get(key); res != nil {
		return res, nil
	}
	res, err := runChecker(ctx, python, req)
	if err != nil {
		return nil, err
	}
	memo.put(key, res)
	return res, nil
}

func runChecker(ctx context.Context, python string, req checkRequest) (*checkResult, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	// -I -S: the checker needs only the standard library, and nothing from
	// the environment or the working directory may change it.
	cmd := exec.CommandContext(ctx, python, "-I", "-S", "-c", checkerScript)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{} // nothing of the service's environment
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", ErrChecker, ctx.Err())
		}
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		return nil, fmt.Errorf("%w: %s: %v: %s", ErrChecker, python, err, msg)
	}
	var res checkResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("%w: decode its answer: %v", ErrChecker, err)
	}
	return &res, nil
}

// firstMatch returns the first of names that a forbidden entry matches, and
// the entry.
func firstMatch(forbidden []string, names ...string) (name, entry string) {
	for _, n := range names {
		for _, f := range forbidden {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			if prefix, ok := strings.CutSuffix(f, "*"); ok {
				if strings.HasPrefix(n, prefix) {
					return n, f
				}
			} else if n == f || strings.HasPrefix(n, f+".") {
				return n, f
			}
		}
	}
	return "", ""
}

func forbiddenMessage(name string, line int) string {
	return fmt.Sprintf("'%s' is not allowed in node code (line %d): node code may not start processes, open sockets, "+
		"load native code, send signals or import modules dynamically; "+
		"do the work in Python with the installed libraries (use requests for HTTP)", name, line)
}

func missingMessage(info *runtimeinfo.Info, module string, line int) string {
	msg := fmt.Sprintf("module '%s' is not installed in the sandbox runtime (line %d)", module, line)
	if l := info.Library(module); l != nil && l.Error == "" && l.Name != module {
		return msg + fmt.Sprintf("; %s is installed and imported as '%s' (`import %s`)", cmp.Or(l.Distribution, module), l.Name, l.Name)
	}
	if libs := info.InstalledLibraries(); len(libs) > 0 {
		msg += "; use the standard library or the installed libraries: " + strings.Join(libs, ", ")
	}
	return msg
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
