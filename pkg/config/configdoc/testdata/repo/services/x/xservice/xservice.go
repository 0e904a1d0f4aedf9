// Package service is named like pkg/service on purpose.
package service

// Common is the x service's own settings.
type Common struct {
	Port int `env:"X_PORT" default:"8080"`
}
