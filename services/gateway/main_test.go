package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// TestRun starts the binary's run function as main does, configured from
// the environment, against the embedded NATS and FerretDB.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	infra, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := infra.Close(); err != nil {
			t.Error(err)
		}
	}()
	key, hash, err := gateway.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, []byte(fmt.Sprintf("- name: ops\n  sha256: %s\n  scopes: [admin]\n", hash)), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	t.Setenv("NATS_URL", infra.NATSURL)
	t.Setenv("MONGODB_URI", infra.MongoURI)
	t.Setenv("HEALTH_ADDR", "127.0.0.1:0")
	t.Setenv("GATEWAY_ADDR", addr)
	t.Setenv("LOG_LEVEL", "warn")

	t.Run("without keys it does not start", func(t *testing.T) {
		err := runMain(ctx)
		if err == nil || !strings.Contains(err.Error(), "NOVA_GATEWAY_KEYS_FILE is required") {
			t.Errorf("run without keys: %v", err)
		}
	})

	t.Setenv("NOVA_GATEWAY_KEYS_FILE", keysFile)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runMain(rctx) }()
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		status := get(t, base+"/v1/executions", key)
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never answered 200 on %s (last status %d)", addr, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status := get(t, base+"/v1/executions", ""); status != http.StatusUnauthorized {
		t.Errorf("without a key: %d, want 401", status)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not stop")
	}
}

func runMain(ctx context.Context) error {
	var cfg config
	return service.Run(ctx, "gateway", &cfg, func(ctx context.Context, env *service.Env) error {
		return run(ctx, env, cfg)
	})
}

func get(t *testing.T, url, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestReadyOnlyOnceStarted: /readyz answers 503 "starting" while a
// service starts, connected to NATS or not, and 200 once it says it has
// started, so that no probe calls ready a service that may still refuse to
// start.
func TestReadyOnlyOnceStarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	health := freeAddr(t)
	t.Setenv("NATS_URL", n.URL())
	t.Setenv("HEALTH_ADDR", health)
	t.Setenv("LOG_LEVEL", "warn")

	started := make(chan struct{})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var cfg config
	go func() {
		done <- service.Run(rctx, "gateway", &cfg, func(ctx context.Context, env *service.Env) error {
			<-started
			env.Started()
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for {
		code, body := readyz()
		if code != 0 {
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
				t.Fatalf("/readyz before the service started: %d %s; want 503 saying starting", code, body)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("/readyz never answered: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(started)
	for {
		code, body := readyz()
		if code == http.StatusOK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("/readyz after the service started: %d %s; want 200", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
