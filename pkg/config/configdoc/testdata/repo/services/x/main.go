// Command x is a fake service whose config embeds pkg/ settings, its own
// package's, and a package named like pkg/service.
package main

import (
	"os"

	model "example.com/fake/pkg/llm"
	"example.com/fake/pkg/service"
	xservice "example.com/fake/services/x/xservice"
)

type config struct {
	service.Common
	model.Settings
	xservice.Common
	// Workers is how many
	// run at once.
	Workers int    `env:"X_WORKERS" default:"4"`
	Pipe    string `env:"X_PIPE" default:"a|b"` // Pipe is <a> or *b* or _c_.
	Plain   string
	inner   int `env:"X_INNER"`
}

func main() {
	var cfg config
	os.Exit(service.Main("x", &cfg, func() error { return nil }))
}
