package natsauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"sigs.k8s.io/yaml"

	"github.com/novaflow/nova/pkg/bus"
)

// compose is the part of deploy/compose.yaml this test reads (anchors and
// merge keys resolved by the YAML decoder, as Compose resolves them).
type compose struct {
	Services map[string]struct {
		Image       string            `json:"image"`
		Environment map[string]string `json:"environment"`
		Volumes     []string          `json:"volumes"`
		Build       *struct {
			Context    string `json:"context"`
			Dockerfile string `json:"dockerfile"`
		} `json:"build"`
	} `json:"services"`
}

// TestComposeServicesLogIn checks deploy/compose.yaml against the NATS
// config it mounts: every NOVA service is built from its Dockerfile, logs
// in as its own user with the password the server is given, uses its inbox
// prefix and sends traces to the collector; connected that way, each can
// declare the streams.
func TestComposeServicesLogIn(t *testing.T) {
	data, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, infra := range []string{"nats", "mongo", "jaeger", "otel-collector"} {
		if _, ok := c.Services[infra]; !ok {
			t.Errorf("compose.yaml has no %s", infra)
		}
	}
	natsSvc := c.Services["nats"]
	for _, f := range []string{"./nats/nats.conf:", "./nats/accounts.conf:"} {
		if !slices.ContainsFunc(natsSvc.Volumes, func(v string) bool { return len(v) > len(f) && v[:len(f)] == f }) {
			t.Errorf("the nats service does not mount %s", f)
		}
	}

	// The server as compose starts it: its environment holds the passwords.
	for k, v := range natsSvc.Environment {
		t.Setenv(k, v)
	}
	opts, err := serverOptions(t)
	if err != nil {
		t.Fatalf("nats.conf with compose's environment: %v", err)
	}
	s := startWith(t, opts)

	services := []string{userGraphEngine, userSandbox, userAudit, userInputAnalyzer, userCodeGenerator, userCodeValidator, userOutputValidator}
	for _, name := range services {
		t.Run(name, func(t *testing.T) {
			svc, ok := c.Services[name]
			if !ok {
				t.Fatalf("compose.yaml has no service %s", name)
			}
			if svc.Build == nil || svc.Build.Context != ".." || svc.Build.Dockerfile != "services/"+name+"/Dockerfile" {
				t.Errorf("build %+v, want services/%s/Dockerfile from the repository root", svc.Build, name)
			} else if _, err := os.Stat(filepath.Join("../../..", svc.Build.Dockerfile)); err != nil {
				t.Errorf("Dockerfile: %v", err)
			}
			env := svc.Environment
			if env["NATS_USER"] != name || env["NATS_INBOX_PREFIX"] != inboxPrefix(name) {
				t.Errorf("NATS_USER %q, NATS_INBOX_PREFIX %q: want its own user and inbox", env["NATS_USER"], env["NATS_INBOX_PREFIX"])
			}
			if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://otel-collector:4318" {
				t.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT = %q", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
			}
			if env["NATS_URL"] != "nats://nats:4222" {
				t.Errorf("NATS_URL = %q", env["NATS_URL"])
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			v := &violations{}
			b, err := bus.Connect(ctx, s.url(), bus.WithName(name), bus.WithNATSOptions(
				nats.UserInfo(env["NATS_USER"], env["NATS_PASSWORD"]),
				nats.CustomInboxPrefix(env["NATS_INBOX_PREFIX"]),
				nats.ErrorHandler(v.handler)))
			if err != nil {
				t.Fatalf("log in with compose's credentials: %v", err)
			}
			defer b.Close()
			if err := b.EnsureStreams(ctx); err != nil {
				t.Errorf("declare the streams: %v (refused: %v)", err, v.list())
			}
		})
	}

	// The gateway logs in as its own user, starts workflows and reads the
	// chain of work; its keys file holds the documented key's hash only.
	t.Run(userGateway, func(t *testing.T) {
		svc, ok := c.Services[userGateway]
		if !ok {
			t.Fatal("compose.yaml has no gateway")
		}
		env := svc.Environment
		if env["NATS_USER"] != userGateway || env["NATS_INBOX_PREFIX"] != inboxPrefix(userGateway) ||
			env["MONGODB_URI"] != "mongodb://mongo:27017" || env["NOVA_GATEWAY_KEYS_FILE"] == "" {
			t.Errorf("environment %v", env)
		}
		if svc.Build == nil || svc.Build.Dockerfile != "services/gateway/Dockerfile" {
			t.Errorf("build %+v", svc.Build)
		}
		var keysFile string
		for _, vol := range svc.Volumes {
			if src, dst, _ := strings.Cut(vol, ":"); strings.HasPrefix(dst, env["NOVA_GATEWAY_KEYS_FILE"]) {
				keysFile = src
			}
		}
		keys, err := os.ReadFile(filepath.Join("../..", keysFile))
		sum := sha256.Sum256([]byte("nova_gk_compose-dev-only"))
		if err != nil || !strings.Contains(string(keys), hex.EncodeToString(sum[:])) || strings.Contains(string(keys), "sha256: nova_gk") {
			t.Errorf("keys file %q: %v\n%s", keysFile, err, keys)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		v := &violations{}
		b, err := bus.Connect(ctx, s.url(), bus.WithName(userGateway), bus.WithNATSOptions(
			nats.UserInfo(env["NATS_USER"], env["NATS_PASSWORD"]),
			nats.CustomInboxPrefix(env["NATS_INBOX_PREFIX"]),
			nats.ErrorHandler(v.handler)))
		if err != nil {
			t.Fatalf("log in with compose's credentials: %v", err)
		}
		defer b.Close()
		if _, err := b.JetStream().Stream(ctx, bus.StreamCommands); err != nil {
			t.Errorf("read the commands stream: %v (refused: %v)", err, v.list())
		}
	})
}

// TestCollectorForwardsToJaeger: the collector compose mounts receives OTLP
// on the port the services send to and forwards traces to compose's Jaeger.
func TestCollectorForwardsToJaeger(t *testing.T) {
	data, err := os.ReadFile("../../otel/collector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Receivers map[string]struct {
			Protocols map[string]struct {
				Endpoint string `json:"endpoint"`
			} `json:"protocols"`
		} `json:"receivers"`
		Exporters map[string]struct {
			Endpoint string `json:"endpoint"`
		} `json:"exporters"`
		Service struct {
			Pipelines map[string]struct {
				Receivers []string `json:"receivers"`
				Exporters []string `json:"exporters"`
			} `json:"pipelines"`
		} `json:"service"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Receivers["otlp"].Protocols["http"].Endpoint; got != "0.0.0.0:4318" {
		t.Errorf("OTLP/HTTP receiver on %q, want 0.0.0.0:4318 (OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318)", got)
	}
	traces := cfg.Service.Pipelines["traces"]
	if !slices.Contains(traces.Receivers, "otlp") || len(traces.Exporters) == 0 {
		t.Fatalf("traces pipeline %+v", traces)
	}
	for _, e := range traces.Exporters {
		if cfg.Exporters[e].Endpoint == "jaeger:4317" {
			return
		}
	}
	t.Errorf("no exporter of the traces pipeline sends to jaeger:4317: %+v", cfg.Exporters)
}
