// Command nova is NOVA's command line: an all-in-one dev server, a runner
// for one workflow, a validator, a chain-of-work reader, and tools for the
// dead letters and the generated-code cache.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `nova: run workflow graphs whose nodes are code or natural-language tasks

Usage:
  nova dev      [--data-dir DIR] [--nats-port N] [--mongo-port N] [--gateway-addr ADDR] [--no-auth]
  nova run      FILE [--set key=value]... [--context-file F.json] [--json] [--chain] [--progress] [--data-dir DIR]
                [--remote [--detach]]
  nova run      --remote WORKFLOW [--set key=value]... [--detach] [--json] [--progress]
  nova validate FILE
  nova register FILE [--timeout 30s] [--json]
  nova watch    EXECUTION_ID [--timeout D]
  nova cancel   EXECUTION_ID [--reason TEXT] [--timeout 10s] [--json]
  nova signal   EXECUTION_ID SIGNAL [--set key=value]... [--data JSON] [--timeout 10s] [--json]
  nova rerun    EXECUTION_ID [--from NODE] [--set key=value]... [--newest] [--timeout 10m | --no-wait] [--json]
                [--data-dir DIR | --mongo URI]
  nova schedule list [--workflow W] [--json]
  nova schedule add WORKFLOW (--cron EXPR [--timezone TZ] | --every DUR) [--id ID] [--set key=value]...
                [--catchup none|latest|all] [--paused] [--timeout 10s] [--json]
  nova schedule pause|resume|delete WORKFLOW ID [--timeout 10s] [--json]
  nova chain    EXECUTION_ID [--data-dir DIR | --mongo URI] [--json]
  nova chain    --from-file FILE.jsonl [EXECUTION_ID] [--json]
  nova chain export [--since T] [--until T] [--workflow W] [--data-dir DIR | --mongo URI] > FILE.jsonl
  nova pin      EXECUTION_ID [NODE...] [-o FILE] [--data-dir DIR | --mongo URI]
  nova cache list [--json] [--data-dir DIR]
  nova cache show KEY [--json] [--data-dir DIR]
  nova cache purge (KEY... | --all) [--data-dir DIR]
  nova dlq list [--consumer C] [--limit N] [--json] [--data-dir DIR]
  nova dlq show SEQ [--json] [--data-dir DIR]
  nova dlq replay SEQ [--again] [--force] [--dry-run] [--data-dir DIR]

nova chain export writes whole executions, one JSON line each, started in
[--since, --until) (RFC 3339 times or dates); nova chain --from-file reads
such a file back. nova pin writes the workflow an execution ran (YAML) with
its AI nodes pinned to the code they ran there, so that they call no model;
nova cache lists, shows and removes the generated code AI nodes reuse.
nova cancel stops a running execution; nova signal sends the signal a wait
node waits for, its payload from --data and --set. nova rerun runs an ended
execution again from a node (default: the one that failed), with the context
its chain of work holds before that node and the --set changes; the nodes
before it are carried over, not run again. nova schedule starts a registered
workflow on a cron expression or at an interval. nova register stores a
definition with a running deployment (nova dev) for starts by name.

Environment: NATS_URL and MONGODB_URI use external servers instead of the
embedded ones; OTEL_EXPORTER_OTLP_ENDPOINT exports traces.
`

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitInvalid = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr *os.File) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitInvalid
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return cmdDev(ctx, rest, stdout, stderr)
	case "run":
		return cmdRun(ctx, rest, stdout, stderr)
	case "validate":
		return cmdValidate(ctx, rest, stdout, stderr)
	case "register":
		return cmdRegister(ctx, rest, stdout, stderr)
	case "watch":
		return cmdWatch(ctx, rest, stdout, stderr)
	case "cancel":
		return cmdCancel(ctx, rest, stdout, stderr)
	case "signal":
		return cmdSignal(ctx, rest, stdout, stderr)
	case "rerun":
		return cmdRerun(ctx, rest, stdout, stderr)
	case "schedule":
		return cmdSchedule(ctx, rest, stdout, stderr)
	case "chain":
		return cmdChain(ctx, rest, stdout, stderr)
	case "dlq":
		return cmdDLQ(ctx, rest, stdout, stderr)
	case "cache":
		return cmdCache(ctx, rest, stdout, stderr)
	case "pin":
		return cmdPin(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "nova: unknown command %q\n\n%s", cmd, usage)
		return exitInvalid
	}
}
