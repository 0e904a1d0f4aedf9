// Package console is NOVA's web console: a page and its assets, embedded in
// the gateway binary, that use only the gateway's public API. The
// TypeScript in src/ is compiled by tsc into dist/ (`make console`), which is
// committed so that a Go build needs no JavaScript tools; `make check`
// verifies dist/ is what src/ compiles to. vendor/ holds the one library
// it uses, dagre (graph layout), as published.
package console

import (
	"bytes"
	"embed"
	"fmt"
	"html"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
)

//go:embed index.html console.css favicon.svg dist/*.js vendor/dagre/dagre.min.js
var files embed.FS

// Prefix is where the assets are served; the page itself is at "/".
const Prefix = "/console/"

// securityHeaders are sent with the page and every asset: nothing is loaded
// from elsewhere, nothing runs inline, and no other site may frame it.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// Settings are what the page tells the console about the deployment.
type Settings struct {
	// JaegerURL is Jaeger's UI: each execution links to its trace there.
	JaegerURL string
}

// jaegerMeta is the page's line that carries Settings.JaegerURL.
const jaegerMeta = `<meta name="nova-jaeger-url" content="">`

// PageFor serves the console's page (GET /) with settings written into it
// (HTML-escaped). A Jaeger URL must be an absolute http or https URL.
func PageFor(settings Settings) (http.HandlerFunc, error) {
	page, err := files.ReadFile("index.html")
	if err != nil {
		return nil, err
	}
	if settings.JaegerURL != "" {
		u, err := url.Parse(settings.JaegerURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("the Jaeger URL %q is not an absolute http or https URL", settings.JaegerURL)
		}
		page = bytes.Replace(page, []byte(jaegerMeta), []byte(`<meta name="nova-jaeger-url" content="`+
			html.EscapeString(strings.TrimRight(settings.JaegerURL, "/"))+`">`), 1)
	}
	return func(w http.ResponseWriter, r *http.Request) { write(w, r, "index.html", page) }, nil
}

// Asset serves a file under Prefix, and 404 for anything else (found is
// false then, for the caller to answer).
func Asset(w http.ResponseWriter, r *http.Request) (found bool) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if name == r.URL.Path || name == "" || name == "index.html" || !fs.ValidPath(name) {
		return false
	}
	if _, err := fs.Stat(files, name); err != nil {
		return false
	}
	serve(w, r, name)
	return true
}

func serve(w http.ResponseWriter, r *http.Request, name string) {
	data, err := files.ReadFile(name)
	if err != nil {
		http.Error(w, "missing console asset", http.StatusInternalServerError)
		return
	}
	write(w, r, name, data)
}

func write(w http.ResponseWriter, r *http.Request, name string, data []byte) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	// The page and its assets change with the binary: revalidate.
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}
