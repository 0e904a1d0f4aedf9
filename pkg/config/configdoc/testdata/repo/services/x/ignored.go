//go:build ignore

// A generator script: not part of package main.
package other

type config struct {
	Ignored string `env:"X_IGNORED"`
}
