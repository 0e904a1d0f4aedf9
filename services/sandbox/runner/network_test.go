package runner

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The network here is closed: the servers a program may reach are the test's
// own on the host's loopback, which the allow list names as IP literals.
func TestRunNetwork(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Query().Get("name"))
	}))
	defer plain.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secure hello")
	}))
	defer tls.Close()
	plainHost := hostOf(t, plain.URL)
	tlsHost := hostOf(t, tls.URL)
	_, plainPort, _ := net.SplitHostPort(plainHost)

	get := `import requests, urllib3, time
urllib3.disable_warnings()
start = time.monotonic()
try:
    r = requests.get(context['url'], verify=False, timeout=10)
    context['got'] = [r.status_code, r.text.strip()]
except requests.exceptions.RequestException as e:
    context['got'] = ['error', str(e)]
context['fast'] = time.monotonic() - start < 5
`
	direct := `import socket, time
out = {}
for name, addr in [('host loopback', ('127.0.0.1', context['port'])), ('outside', ('203.0.113.1', 80))]:
    start = time.monotonic()
    try:
        socket.create_connection(addr, timeout=5).close()
        out[name] = 'connected'
    except OSError as e:
        out[name] = 'refused' if time.monotonic() - start < 2 else 'slow failure'
context['direct'] = out
`
	tests := []struct {
		name    string
		req     Request
		want    string // JSON of the updates
		contain string // in the got text, when want is ""
	}{
		{
			name: "allowed http host",
			req:  Request{Code: get, Network: true, AllowHosts: []string{plainHost}, Context: obj(t, map[string]any{"url": plain.URL + "/?name=nova"})},
			want: `{"got": [200, "hello nova"], "fast": true}`,
		},
		{
			name: "allowed https host through CONNECT",
			req:  Request{Code: get, Network: true, AllowHosts: []string{tlsHost}, Context: obj(t, map[string]any{"url": tls.URL})},
			want: `{"got": [200, "secure hello"], "fast": true}`,
		},
		{
			name:    "host not in allow_hosts",
			req:     Request{Code: get, Network: true, AllowHosts: []string{tlsHost}, Context: obj(t, map[string]any{"url": plain.URL})},
			contain: "not in this node's allow_hosts",
		},
		{
			name:    "https host not in allow_hosts",
			req:     Request{Code: get, Network: true, AllowHosts: []string{plainHost}, Context: obj(t, map[string]any{"url": tls.URL})},
			contain: "403 Forbidden",
		},
		{
			name:    "a name leading to the host's loopback",
			req:     Request{Code: get, Network: true, AllowHosts: []string{"localhost:" + plainPort}, Context: obj(t, map[string]any{"url": "http://localhost:" + plainPort})},
			contain: "not a public address",
		},
		{
			name: "direct connections bypassing the proxy",
			req:  Request{Code: direct, Network: true, AllowHosts: []string{plainHost, "203.0.113.1:80"}, Context: obj(t, map[string]any{"port": mustAtoi(t, plainPort)})},
			want: `{"direct": {"host loopback": "refused", "outside": "refused"}}`,
		},
		{
			name: "no network at all",
			req:  Request{Code: direct + "import os\ncontext['proxy'] = os.environ.get('HTTPS_PROXY')", Context: obj(t, map[string]any{"port": mustAtoi(t, plainPort)})},
			want: `{"direct": {"host loopback": "refused", "outside": "refused"}, "proxy": null}`,
		},
	}
	forEachMode(t, Config{}, func(t *testing.T, r *Runner) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res := run(t, r, tt.req)
				if tt.want != "" {
					wantSuccess(t, res, tt.want)
					return
				}
				wantSuccess(t, res, mustJSON(t, map[string]any{"got": res.Updates["got"], "fast": true}))
				got := fmt.Sprint(decoded(t, res.Updates["got"]))
				if !strings.Contains(got, tt.contain) {
					t.Errorf("got %s, want it to contain %q", got, tt.contain)
				}
			})
		}
	})
}

// A networked run that leaves connections open ends with nothing of its
// egress left behind (goleak checks the broker's goroutines).
func TestRunNetworkConnectionsEndWithTheRun(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	forEachMode(t, Config{}, func(t *testing.T, r *Runner) {
		start := time.Now()
		res := run(t, r, Request{
			Code:       "import requests\nr = requests.get(context['url'], stream=True, timeout=30)\ncontext['status'] = r.status_code",
			Network:    true,
			AllowHosts: []string{hostOf(t, srv.URL)},
			Context:    obj(t, map[string]any{"url": srv.URL}),
		})
		wantSuccess(t, res, `{"status": 200}`)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the run took %s", d)
		}
	})
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
