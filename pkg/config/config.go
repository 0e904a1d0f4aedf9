// Package config loads a service's typed configuration from the environment.
//
// A config is a struct whose fields carry tags:
//
//	NATSURL string `env:"NATS_URL" default:"nats://127.0.0.1:4222" required:"true"`
//	APIKey  string `env:"OPENAI_API_KEY" secret:"true"`
//
// Supported field types: string, bool, int, int64, float64, time.Duration
// and []string (comma separated).
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Load fills the struct pointed to by cfg from getenv (os.Getenv when nil),
// applying defaults, and returns every problem at once.
func Load(cfg any, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: want a pointer to a struct, got %T", cfg)
	}
	var errs []error
	walk(v.Elem(), func(f reflect.StructField, fv reflect.Value) {
		name := f.Tag.Get("env")
		raw := getenv(name)
		if raw == "" {
			raw = f.Tag.Get("default")
		}
		if raw == "" {
			if f.Tag.Get("required") == "true" {
				errs = append(errs, fmt.Errorf("%s is required", name))
			}
			return
		}
		if err := set(fv, raw); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, mask(f, raw), err))
		}
	})
	return errors.Join(errs...)
}

// Attrs lists the configuration as slog attributes with secrets masked, so
// that a service can log what it runs with.
func Attrs(cfg any) []any {
	var attrs []any
	walk(reflect.ValueOf(cfg).Elem(), func(f reflect.StructField, fv reflect.Value) {
		attrs = append(attrs, slog.String(f.Tag.Get("env"), mask(f, fmt.Sprint(fv.Interface()))))
	})
	return attrs
}

func walk(v reflect.Value, fn func(reflect.StructField, reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) && f.Tag.Get("env") == "" {
			walk(fv, fn)
			continue
		}
		if f.Tag.Get("env") != "" {
			fn(f, fv)
		}
	}
}

// mask hides secrets: a secret value shows only whether it is set, and a URL
// shows no password.
func mask(f reflect.StructField, s string) string {
	if s == "" || s == "[]" {
		return s
	}
	if f.Tag.Get("secret") == "true" {
		return "***"
	}
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "***")
			return strings.Replace(u.String(), "%2A%2A%2A", "***", 1)
		}
	}
	return s
}

func set(fv reflect.Value, raw string) error {
	switch fv.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(d))
		return nil
	case []string:
		var parts []string
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		fv.Set(reflect.ValueOf(parts))
		return nil
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("not a boolean")
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		fv.SetInt(n)
	case reflect.Float64:
		n, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("not a number")
		}
		fv.SetFloat(n)
	default:
		return fmt.Errorf("unsupported field type %s", fv.Type())
	}
	return nil
}
