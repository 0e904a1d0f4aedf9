// Package config stands for pkg/config: its Load is a loader.
package config

// Load fills cfg.
func Load(cfg any, getenv func(string) string) error { return nil }
