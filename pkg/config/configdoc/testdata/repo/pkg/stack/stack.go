// Package stack holds options whose fields point at settings structs, read
// with this file's imports (llm under another name).
package stack

import model "example.com/fake/pkg/llm"

// Options are what the CLI fills from the environment.
type Options struct {
	LLM *model.Settings
}
