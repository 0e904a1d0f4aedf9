package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/config"
)

type sample struct {
	NATSURL  string        `env:"NATS_URL" default:"nats://127.0.0.1:4222"`
	MongoURI string        `env:"MONGODB_URI" required:"true"`
	APIKey   string        `env:"OPENAI_API_KEY" secret:"true"`
	Workers  int           `env:"WORKERS" default:"2"`
	Timeout  time.Duration `env:"TIMEOUT" default:"30s"`
	Debug    bool          `env:"DEBUG"`
	Tags     []string      `env:"TAGS"`
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    sample
		wantErr []string
	}{
		{name: "defaults", env: map[string]string{"MONGODB_URI": "mongodb://x"},
			want: sample{NATSURL: "nats://127.0.0.1:4222", MongoURI: "mongodb://x", Workers: 2, Timeout: 30 * time.Second}},
		{name: "overrides", env: map[string]string{"MONGODB_URI": "m", "WORKERS": "8", "TIMEOUT": "1m", "DEBUG": "true", "TAGS": "a, b,,c"},
			want: sample{NATSURL: "nats://127.0.0.1:4222", MongoURI: "m", Workers: 8, Timeout: time.Minute, Debug: true, Tags: []string{"a", "b", "c"}}},
		{name: "every problem at once", env: map[string]string{"WORKERS": "many", "TIMEOUT": "soon"},
			wantErr: []string{"MONGODB_URI is required", `WORKERS="many": not an integer`, `TIMEOUT="soon"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got sample
			err := config.Load(&got, env(tt.env))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("want an error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAttrsMaskSecrets(t *testing.T) {
	cfg := sample{APIKey: "sk-very-secret", MongoURI: "mongodb://nova:hunter2@db:27017/nova"}
	dump := fmt.Sprint(config.Attrs(&cfg))
	for _, leaked := range []string{"sk-very-secret", "hunter2"} {
		if strings.Contains(dump, leaked) {
			t.Errorf("dump %s shows %q", dump, leaked)
		}
	}
	if !strings.Contains(dump, "OPENAI_API_KEY=***") || !strings.Contains(dump, "mongodb://nova:***@db:27017/nova") {
		t.Errorf("dump %s does not show masked values", dump)
	}
}
