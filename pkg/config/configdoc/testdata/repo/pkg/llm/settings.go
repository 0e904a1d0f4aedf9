// Package llm stands for a settings package of pkg/.
package llm

import "time"

// Settings is the model API.
type Settings struct {
	// APIKey authenticates
	// to the model API.
	APIKey string `env:"FAKE_API_KEY" secret:"true"`
	// Limits is a named field without an env tag: read without a prefix.
	Limits Limits
	// Timeout is a struct type of another module: nothing to walk.
	Timeout time.Duration `env:"FAKE_TIMEOUT" default:"10s"`
	Start   time.Time
	// hidden is unexported, so package config does not read it.
	hidden string `env:"FAKE_HIDDEN"`
	// Ptr is a pointer, which package config does not walk.
	Ptr *Limits
}

// Limits bound the calls.
type Limits struct {
	Max int `env:"FAKE_MAX" default:"3" required:"true"`
}
