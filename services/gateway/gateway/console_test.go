package gateway_test

import (
	"regexp"
	"strings"
	"testing"
)

// TestConsoleFiles: the console's page and assets are served without a key,
// with types a browser runs, under a policy that loads nothing from
// elsewhere and runs nothing inline; the page names only files that are
// served.
func TestConsoleFiles(t *testing.T) {
	page := h.do(t, h.url, request{method: "GET", path: "/"})
	if page.status != 200 {
		t.Fatalf("GET / = %d %s", page.status, page.body)
	}
	if ct := page.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("GET / Content-Type = %q", ct)
	}
	csp := page.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy allows inline code: %q", csp)
	}
	if got := page.header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q", got)
	}
	if regexp.MustCompile(`<script>|\son[a-z]+=`).Match(page.body) {
		t.Errorf("the page has inline script:\n%s", page.body)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/console/[^"]+)"`).FindAllSubmatch(page.body, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d console files, want the stylesheet, dagre and main.js:\n%s", len(refs), page.body)
	}
	types := map[string]string{".js": "text/javascript", ".css": "text/css"}
	for _, ref := range refs {
		path := string(ref[1])
		resp := h.do(t, h.url, request{method: "GET", path: path})
		if resp.status != 200 {
			t.Errorf("GET %s = %d", path, resp.status)
			continue
		}
		for ext, want := range types {
			if strings.HasSuffix(path, ext) && !strings.HasPrefix(resp.header.Get("Content-Type"), want) {
				t.Errorf("GET %s Content-Type = %q, want %s", path, resp.header.Get("Content-Type"), want)
			}
		}
	}
	// Every module main.js imports, and every module they import, is served.
	imports := regexp.MustCompile(`from "\./([a-z]+\.js)"`)
	seen := map[string]bool{"main.js": true}
	for queue := []string{"main.js"}; len(queue) > 0; queue = queue[1:] {
		resp := h.do(t, h.url, request{method: "GET", path: "/console/dist/" + queue[0]})
		if resp.status != 200 {
			t.Errorf("GET /console/dist/%s = %d", queue[0], resp.status)
			continue
		}
		for _, m := range imports.FindAllSubmatch(resp.body, -1) {
			if name := string(m[1]); !seen[name] {
				seen[name] = true
				queue = append(queue, name)
			}
		}
	}
	for _, want := range []string{"api.js", "dom.js", "exact.js", "execution.js", "executions.js", "graph.js", "visits.js"} {
		if !seen[want] {
			t.Errorf("%s is not reached from main.js (reached: %v)", want, seen)
		}
	}
}
