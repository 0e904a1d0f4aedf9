// Command configdoc writes the configuration reference from the services'
// config structs, or with -check fails when the committed one is out of
// date:
//
//	go run ./pkg/config/cmd/configdoc -root . -out docs/reference/configuration.md
//	go run ./pkg/config/cmd/configdoc -root . -out docs/reference/configuration.md -check
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/novaflow/nova/pkg/config/configdoc"
)

// regenerate is what the messages tell a developer to run.
const regenerate = "make config-doc"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("configdoc", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", ".", "the repository root, the `DIR` of go.work")
	out := fl.String("out", "docs/reference/configuration.md", "the reference `FILE`; a relative path is taken from -root")
	check := fl.Bool("check", false, "compare FILE with what the source generates instead of writing it; exit 1 when it is out of date")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "configdoc: unexpected arguments %q (flags only)\n", fl.Args())
		return 2
	}
	file := *out
	if !filepath.IsAbs(file) {
		file = filepath.Join(*root, file)
	}
	m, err := configdoc.Scan(*root)
	if err != nil {
		fmt.Fprintf(stderr, "configdoc: %v\n", err)
		return 1
	}
	want := configdoc.Render(m)
	if !*check {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			fmt.Fprintf(stderr, "configdoc: %v\n", err)
			return 1
		}
		if err := os.WriteFile(file, want, 0o644); err != nil {
			fmt.Fprintf(stderr, "configdoc: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "configdoc: wrote %s (%d services, %d settings structs)\n", *out, len(m.Services), len(m.Groups))
		return 0
	}
	have, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(stderr, "configdoc: %s does not exist: run %s and commit it\n", *out, regenerate)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "configdoc: %v\n", err)
		return 1
	}
	if bytes.Equal(have, want) {
		fmt.Fprintf(stdout, "configdoc: %s is up to date\n", *out)
		return 0
	}
	fmt.Fprintf(stderr, "configdoc: %s is out of date with the config structs (their env tags or doc comments changed)\n", *out)
	fmt.Fprintf(stderr, "- lines are in the committed file, + lines what the source generates now:\n%s", configdoc.Diff(string(have), string(want), 40))
	fmt.Fprintf(stderr, "configdoc: run %s and commit %s\n", regenerate, *out)
	return 1
}
