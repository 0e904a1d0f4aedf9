package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The page carries the Jaeger URL it was given, escaped, and refuses one
// that is no absolute http(s) URL.
func TestPageForJaegerURL(t *testing.T) {
	get := func(s Settings) string {
		t.Helper()
		page, err := PageFor(s)
		if err != nil {
			t.Fatalf("PageFor(%+v): %v", s, err)
		}
		rec := httptest.NewRecorder()
		page(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Security-Policy") == "" {
			t.Fatalf("GET / = %d, headers %v", rec.Code, rec.Header())
		}
		return rec.Body.String()
	}
	if body := get(Settings{}); !strings.Contains(body, `<meta name="nova-jaeger-url" content="">`) {
		t.Errorf("without a Jaeger URL the page should carry an empty one:\n%s", body)
	}
	body := get(Settings{JaegerURL: `http://jaeger.local:16686/?a="x"&b=<y>/`})
	if !strings.Contains(body, `<meta name="nova-jaeger-url" content="http://jaeger.local:16686/?a=&#34;x&#34;&amp;b=&lt;y&gt;">`) {
		t.Errorf("the Jaeger URL is not in the page, escaped:\n%s", body)
	}
	for _, bad := range []string{"javascript:alert(1)", "jaeger:16686", "/relative", "ftp://host/"} {
		if _, err := PageFor(Settings{JaegerURL: bad}); err == nil || !strings.Contains(err.Error(), "not an absolute http or https URL") {
			t.Errorf("PageFor(%q): %v, want it refused", bad, err)
		}
	}
}

// The page names its icon, and the icon is served: no request for
// /favicon.ico, which the gateway does not serve.
func TestIconServed(t *testing.T) {
	page, err := PageFor(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	page(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if !strings.Contains(rec.Body.String(), `<link rel="icon" href="/console/favicon.svg" type="image/svg+xml">`) {
		t.Errorf("the page names no icon:\n%s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	if !Asset(rec, httptest.NewRequest(http.MethodGet, "/console/favicon.svg", nil)) || rec.Code != http.StatusOK ||
		rec.Header().Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(rec.Body.String(), "<svg") {
		t.Errorf("GET /console/favicon.svg = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}
