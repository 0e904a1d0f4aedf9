package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
)

// storeFlags are the flags of the commands that read the audit store.
type storeFlags struct {
	fs                          *flag.FlagSet
	dataDir, mongoURI, database *string
}

func addStoreFlags(fs *flag.FlagSet) storeFlags {
	return storeFlags{
		fs:       fs,
		dataDir:  fs.String("data-dir", "./.nova", "data directory of the embedded store (default: the store of the nova dev at NATS_URL, else ./.nova)"),
		mongoURI: fs.String("mongo", os.Getenv("MONGODB_URI"), "MongoDB URI of the audit store (instead of --data-dir)"),
		database: fs.String("database", "nova", "database of the chain of work"),
	}
}

// open opens the audit store: the MongoDB of --mongo (default
// $MONGODB_URI), else the embedded store of --data-dir when it is given,
// else the one the nova dev at NATS_URL runs, else the embedded store of
// ./.nova, started for the command. where names the store it opened, for
// messages; release closes it.
func (f storeFlags) open(ctx context.Context) (st *chainstore.Store, release func(), where string, err error) {
	uri, stop := *f.mongoURI, func() {}
	where = "the audit store at " + redacted(uri)
	if uri == "" && !flagSet(f.fs, "data-dir") {
		found, natsURL, derr := devStoreURI(ctx)
		switch {
		case found != "":
			uri, where = found, fmt.Sprintf("the audit store of the nova dev at %s (%s)", natsURL, redacted(found))
		case derr != nil:
			where = fmt.Sprintf("the embedded store of %s (no nova dev reachable at %s: %v; set MONGODB_URI or --data-dir for another store)",
				*f.dataDir, remoteNATSURL(), derr)
		default:
			where = fmt.Sprintf("the embedded store of %s (the NATS server at %s names no nova dev store; set MONGODB_URI or --data-dir for another store)",
				*f.dataDir, natsURL)
		}
	}
	if uri == "" {
		if flagSet(f.fs, "data-dir") {
			where = "the embedded store of " + *f.dataDir
		}
		m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: *f.dataDir})
		if err != nil {
			return nil, nil, where, fmt.Errorf("%s: %w", where, err)
		}
		uri, stop = m.URI(), func() { _ = m.Close() }
	}
	st, err = chainstore.Open(ctx, uri, *f.database)
	if err != nil {
		stop()
		return nil, nil, where, fmt.Errorf("%s: %w", where, err)
	}
	return st, func() {
		_ = st.Close(context.WithoutCancel(ctx))
		stop()
	}, where, nil
}

// printChain prints the chain of work of one execution of the store, as
// writeChain does.
func printChain(ctx context.Context, w io.Writer, st *chainstore.Store, executionID string, asJSON bool) error {
	exec, err := st.Execution(ctx, executionID)
	if errors.Is(err, chainstore.ErrNotFound) {
		// While other executions run, the audit service records a running
		// one up to about 2 s after its start (auditservice.HoldFor).
		return fmt.Errorf("execution %s: %w (one that started a moment ago may not be recorded yet: the audit store has a running execution within about 2 s)", executionID, err)
	}
	if err != nil {
		return fmt.Errorf("execution %s: %w", executionID, err)
	}
	nodes, err := st.Chain(ctx, executionID)
	if err != nil {
		return fmt.Errorf("chain of work of %s: %w", executionID, err)
	}
	return writeChain(w, &chainstore.ExecutionChain{Execution: exec, Nodes: nodes}, asJSON)
}

// writeChain prints an execution's chain of work: as indented JSON (what
// `nova chain --json` prints), or as text, one paragraph per node visit.
func writeChain(w io.Writer, c *chainstore.ExecutionChain, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(c)
	}
	exec, nodes := c.Execution, c.Nodes
	fmt.Fprintf(w, "\nchain of work of %s (workflow %q, %s", exec.ExecutionID, exec.WorkflowName, exec.Status)
	if exec.DurationMs > 0 {
		fmt.Fprintf(w, ", %d ms", exec.DurationMs)
	}
	if exec.ModelCalls > 0 {
		fmt.Fprintf(w, ", $%.6f in %d model calls", exec.CostUSD, exec.ModelCalls)
	}
	fmt.Fprintln(w, ")")
	for _, n := range nodes {
		fmt.Fprintf(w, "\n#%d %s [%s] visit %d: %s, %.1f ms%s\n", n.Sequence, n.NodeID, n.NodeType, n.Visit, n.Status, n.ExecutionTime, visitPlace(n))
		if len(n.ChildExecutionIDs) > 0 {
			fmt.Fprintf(w, "   child executions: %s\n", strings.Join(n.ChildExecutionIDs, ", "))
		}
		if n.NodeType == "decision" && n.PathTaken != "" {
			fmt.Fprintf(w, "   decision %q -> %s\n", n.DecisionResult, n.PathTaken)
		} else if n.PathTaken != "" {
			fmt.Fprintf(w, "   next %s\n", n.PathTaken)
		}
		if n.ErrorMessage != "" {
			fmt.Fprintf(w, "   error: %s\n", n.ErrorMessage)
		}
		if changed := changedKeys(n.InputContext, n.OutputResult); len(changed) > 0 {
			fmt.Fprintf(w, "   context changed: %s\n", strings.Join(changed, ", "))
		}
		if ai := n.AIMetadata; ai != nil {
			printAI(w, ai)
		}
		if n.CodeExecuted != "" {
			fmt.Fprintf(w, "   code:\n%s", indent(n.CodeExecuted, "     | "))
		}
		if n.Stdout != "" {
			fmt.Fprintf(w, "   stdout:\n%s", indent(n.Stdout, "     | "))
		}
		if n.Stderr != "" {
			fmt.Fprintf(w, "   stderr:\n%s", indent(n.Stderr, "     | "))
		}
		if n.Traceback != "" {
			fmt.Fprintf(w, "   traceback:\n%s", indent(n.Traceback, "     | "))
		}
		for _, s := range n.Steps {
			fmt.Fprintf(w, "   step %d %s/%s attempt %d: %s, %.1f ms", s.StepNumber, s.AgentName, s.StepName, s.AttemptNumber, s.Status, s.ExecutionTimeMs)
			if s.SandboxID != "" {
				fmt.Fprintf(w, ", sandbox %s", s.SandboxID)
			}
			if s.ModelUsed != "" {
				fmt.Fprintf(w, ", model %s, %d+%d tokens, $%.6f", s.ModelUsed, s.TokensInput, s.TokensOutput, s.CostUSD)
				if scripted, _ := s.OutputData["scripted"].(bool); scripted {
					fmt.Fprint(w, " [SCRIPTED model]")
				}
			}
			for _, tc := range s.ToolCalls {
				if m, ok := tc.(map[string]any); ok {
					fmt.Fprintf(w, "\n     tool %v(%v)", m["name"], m["arguments"])
				}
			}
			fmt.Fprintln(w)
			if s.ErrorMessage != "" {
				fmt.Fprintf(w, "     error: %s\n", s.ErrorMessage)
			}
		}
	}
	return nil
}

// changedKeys lists the keys a node added, changed or removed.
func changedKeys(before, after map[string]any) []string {
	var keys []string
	for k, v := range after {
		if old, ok := before[k]; !ok || !jsonEqual(old, v) {
			keys = append(keys, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			keys = append(keys, k+" (removed)")
		}
	}
	slices.Sort(keys)
	return keys
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// printAI shows a node's ai_metadata: what the pipeline did and what it cost.
func printAI(w io.Writer, ai map[string]any) {
	scripted := ""
	if b, _ := ai["scripted"].(bool); b {
		scripted = " [SCRIPTED model: offline rules, not a real model]"
	}
	fmt.Fprintf(w, "   AI: task %q\n", ai["prompt_task"])
	fmt.Fprintf(w, "   AI: model %v%s, attempts %v, stages used %v, model calls %v, status %v\n",
		ai["model"], scripted, ai["attempts"], ai["stages_used"], ai["model_calls"], ai["status"])
	if t, ok := ai["tokens"].(map[string]any); ok {
		fmt.Fprintf(w, "   AI: tokens prompt %v, completion %v, cached %v; estimated cost $%.6f\n",
			t["prompt"], t["completion"], t["cached"], ai["cost_usd"])
	}
	if hit, _ := ai["cache_hit"].(bool); hit {
		how := "exact"
		if m, _ := ai["cache_match"].(string); m != "" {
			how = m
		}
		if how == "semantic" {
			how = fmt.Sprintf("semantic, similarity %.4f to entry %.12s", ai["cache_similarity"], ai["cached_key"])
		}
		fmt.Fprintf(w, "   AI: code from the cache (%s), produced by execution %v; saved %v model calls, $%.6f\n",
			how, ai["cached_from_execution"], ai["model_calls_saved"], ai["cost_usd_saved"])
	} else if evicted, _ := ai["cache_evicted"].(bool); evicted {
		fmt.Fprintln(w, "   AI: cached code failed and was evicted; the pipeline wrote new code")
	}
	if ia, ok := ai["input_analysis"].(map[string]any); ok {
		fmt.Fprintf(w, "   AI: input analysis: needs_analysis %v (%v)\n", ia["needs_analysis"], ia["reasoning"])
	}
	if all, ok := ai["all_attempts"].([]any); ok {
		for _, a := range all {
			if m, ok := a.(map[string]any); ok {
				fmt.Fprintf(w, "   AI: attempt %v failed in %v: %v\n", m["attempt"], m["phase"], firstLine(fmt.Sprint(m["error"])))
			}
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// visitPlace says where a visit ran when the execution ran branches: its
// branch, or a map's item.
func visitPlace(n chainstore.NodeDoc) string {
	switch {
	case n.Item != nil:
		return fmt.Sprintf(", item %d", *n.Item)
	case n.Branch != "":
		return ", branch " + n.Branch
	}
	return ""
}
