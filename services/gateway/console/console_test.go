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
