// Command cli is a fake nova CLI: a struct of its own and settings from
// elsewhere, loaded in a loop, and variables read by name.
package main

import (
	"fmt"
	"os"

	"example.com/fake/pkg/config"
	"example.com/fake/pkg/service"
	"example.com/fake/pkg/stack"
)

const homeEnv = "CLI_HOME"

// cliSettings are the CLI's own.
type cliSettings struct {
	// Dir is where the CLI keeps its data.
	Dir string `env:"CLI_DIR" default:".cli"`
}

func main() {
	var own cliSettings
	var opts stack.Options
	for _, cfg := range []any{&own, opts.LLM} {
		if err := config.Load(cfg, nil); err != nil {
			fmt.Println(err)
		}
	}
	common := &service.Common{}
	_ = config.Load(common, nil)
	_ = os.Getenv(homeEnv)
	_, _ = os.LookupEnv(service.URLEnv)
	_ = os.Getenv("FAKE_API_KEY")
	name := "CLI_" + "DYNAMIC"
	_ = os.Getenv(name)
}
