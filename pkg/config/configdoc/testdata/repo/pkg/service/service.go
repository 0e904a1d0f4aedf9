// Package service stands for pkg/service: its Main is a loader.
package service

// URLEnv names the bus URL.
const URLEnv = "FAKE_URL"

// Common is what every fake service reads.
type Common struct {
	URL      string `env:"FAKE_URL" default:"nats://127.0.0.1:4222"`
	Password string `env:"FAKE_PASSWORD" secret:"true"` // Password authenticates to the bus.
}

// Main loads cfg and runs run.
func Main(name string, cfg any, run func() error) int { return 0 }
