package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer written by one goroutine and read by another.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDevServesTheHTTPAPI runs `nova dev` and uses the HTTP API it prints:
// the key it made for the run starts a workflow and waits for it, and no
// key is refused.
func TestDevServesTheHTTPAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	devCtx, stop := context.WithCancel(ctx)
	var stdout, stderr lockedBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- cmdDev(devCtx, []string{"--data-dir", t.TempDir(), "--nats-port", "0", "--mongo-port", "0",
			"--gateway-addr", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	defer func() {
		stop()
		if code := <-exit; code != exitOK {
			t.Errorf("nova dev exited %d\n%s", code, stderr.String())
		}
	}()

	printed := regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`)
	var m []string
	for m == nil {
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("nova dev exited %d before serving\n%s%s", code, stdout.String(), stderr.String())
		case <-ctx.Done():
			t.Fatalf("nova dev printed no HTTP API URL and key:\n%s", stdout.String())
		case <-time.After(50 * time.Millisecond):
		}
		m = printed.FindStringSubmatch(stdout.String())
	}
	url, key := m[1], m[2]
	if strings.Contains(stderr.String(), key) {
		t.Errorf("the key reached the logs:\n%s", stderr.String())
	}

	body := `{"definition": {"name": "dev-api", "nodes": [{"id": "start", "type": "start"},
		{"id": "double", "type": "action", "code": "context['y'] = context['x'] * 2"}, {"id": "end", "type": "end"}],
		"edges": [{"from": "start", "to": "double"}, {"from": "double", "to": "end"}]}, "context": {"x": 21}}`
	post := func(key string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/executions?wait=60s", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("")
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no key: status %d, want 401", resp.StatusCode)
	}
	resp = post(key)
	defer resp.Body.Close()
	var got struct {
		Status  string         `json:"status"`
		Context map[string]any `json:"context"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || got.Status != "succeeded" || got.Context["y"] != 42.0 {
		t.Errorf("start and wait: status %d, execution %+v; want 200, succeeded with y=42", resp.StatusCode, got)
	}
}
