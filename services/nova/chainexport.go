package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
)

// cmdChainExport is `nova chain export`: the executions the flags select,
// whole, one line of JSON each (what `nova chain --json` prints of one),
// on stdout.
func cmdChainExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chain export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := addStoreFlags(fs)
	since := fs.String("since", "", "export the executions started at or after `T` (RFC 3339, or a date: its midnight UTC)")
	until := fs.String("until", "", "export the executions started before `T` (RFC 3339, or a date: its midnight UTC)")
	workflow := fs.String("workflow", "", "export only the executions of workflow `W`")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitInvalid
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "nova chain export: unexpected argument %q (the export goes to stdout: nova chain export > FILE.jsonl)\n", pos[0])
		return exitInvalid
	}
	f := chainstore.ExportFilter{Workflow: *workflow}
	for _, b := range []struct {
		flag, value string
		t           *time.Time
	}{{"--since", *since, &f.Since}, {"--until", *until, &f.Until}} {
		if b.value == "" {
			continue
		}
		if *b.t, err = chainstore.ParseTime(b.value); err != nil {
			fmt.Fprintf(stderr, "nova chain export: %s: %v\n", b.flag, err)
			return exitInvalid
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		fmt.Fprintf(stderr, "nova chain export: --until %s is not after --since %s: nothing started in between\n", *until, *since)
		return exitInvalid
	}

	st, release, _, err := store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "nova chain export: %v\n", err)
		return exitFailed
	}
	defer release()
	out := bufio.NewWriterSize(stdout, 64<<10)
	n := 0
	err = st.Export(ctx, f, func(c *chainstore.ExecutionChain) error {
		if err := c.WriteLine(out); err != nil {
			return err
		}
		n++
		return nil
	})
	// What was exported before a failure is kept whole, line by line.
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write the export: %w", ferr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nova chain export: %v (the export is incomplete: %d executions written)\n", err, n)
		return exitFailed
	}
	fmt.Fprintf(stderr, "nova chain export: %d executions\n", n)
	return exitOK
}

// chainFromFile is `nova chain --from-file FILE [EXECUTION_ID]`: the
// executions of an export (or the one named id), each as `nova chain`
// prints one from the store.
func chainFromFile(file, id string, asJSON bool, stdout, stderr io.Writer) int {
	f, err := os.Open(file)
	if err != nil {
		fmt.Fprintf(stderr, "nova chain: --from-file: %v\n", err)
		return exitInvalid
	}
	defer f.Close()
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	found := false
	err = readExport(f, file, func(c *chainstore.ExecutionChain) (bool, error) {
		if id != "" && c.Execution.ExecutionID != id {
			return true, nil
		}
		found = true
		return id == "", writeChain(out, c, asJSON)
	})
	var broken *exportLineError
	switch {
	case errors.As(err, &broken):
		fmt.Fprintf(stderr, "nova chain: %v\n", err)
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "nova chain: %v\n", err)
		return exitFailed
	case id != "" && !found:
		fmt.Fprintf(stderr, "nova chain: execution %s is not in %s\n", id, file)
		return exitInvalid
	}
	return exitOK
}

// exportLineError is a line of an export file that is not an execution.
type exportLineError struct {
	file string
	line int
	err  error
}

func (e *exportLineError) Error() string {
	return fmt.Sprintf("%s, line %d: not an execution as nova chain export writes one ({\"execution\": {...}, \"nodes\": [...]}): %v", e.file, e.line, e.err)
}

func (e *exportLineError) Unwrap() error { return e.err }

// readExport calls each with the executions of an export, one line each
// (blank lines are skipped), until it returns false or an error. A line
// that is not an execution is an *exportLineError naming file and line.
func readExport(r io.Reader, file string, each func(*chainstore.ExecutionChain) (more bool, err error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if len(bytes.TrimSpace(b)) > 0 {
			var c chainstore.ExecutionChain
			if jerr := json.Unmarshal(b, &c); jerr != nil {
				return &exportLineError{file: file, line: line, err: jerr}
			}
			if c.Execution == nil || c.Execution.ExecutionID == "" {
				return &exportLineError{file: file, line: line, err: errors.New("no execution.execution_id")}
			}
			more, eerr := each(&c)
			if eerr != nil || !more {
				return eerr
			}
		}
		if err != nil { // io.EOF
			return nil
		}
	}
}
