package compose

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// publishedPort is how deploy/compose.yaml publishes a port: on
// ${NOVA_BIND:-127.0.0.1}, from a host port of its own variable.
var publishedPort = regexp.MustCompile(`^\$\{NOVA_BIND:-127\.0\.0\.1\}:\$\{(NOVA_[A-Z_]+_PORT):-([0-9]+)\}:([0-9]+)$`)

// composeFile is what deploy/compose.yaml says of its services' images and
// published ports.
type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Ports []any  `yaml:"ports"`
	} `yaml:"services"`
}

// readCompose reads deploy/compose.yaml.
func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file composeFile
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	return file
}

// TestComposePublishesOnLoopback: every port compose publishes is on
// 127.0.0.1 unless NOVA_BIND says otherwise (MongoDB has no password, NATS's
// monitoring none), each host port is a variable of its own whose default
// is a port no other takes, and every image name is fully qualified, so
// that podman resolves it without an unqualified-search registry.
func TestComposePublishesOnLoopback(t *testing.T) {
	file := readCompose(t)
	variables, defaults := map[string]string{}, map[string]string{}
	published := 0
	for name, svc := range file.Services {
		if svc.Image != "" {
			registry, _, ok := strings.Cut(svc.Image, "/")
			if !ok || !(strings.ContainsAny(registry, ".:") || registry == "localhost") {
				t.Errorf("%s: image %q is not fully qualified (registry/name:tag)", name, svc.Image)
			}
		}
		for _, p := range svc.Ports {
			s, ok := p.(string)
			m := publishedPort.FindStringSubmatch(s)
			if !ok || m == nil {
				t.Errorf("%s publishes %v, not as ${NOVA_BIND:-127.0.0.1}:${NOVA_<NAME>_PORT:-<port>}:<port>", name, p)
				continue
			}
			published++
			if other, dup := variables[m[1]]; dup {
				t.Errorf("%s and %s both publish from %s", name, other, m[1])
			}
			variables[m[1]] = name
			if other, dup := defaults[m[2]]; dup {
				t.Errorf("%s and %s both default to host port %s", name, other, m[2])
			}
			defaults[m[2]] = name
		}
	}
	if published < 10 {
		t.Errorf("%d ports published; want NATS's two, MongoDB's, Jaeger's, the gateway's and each service's health port", published)
	}
}
