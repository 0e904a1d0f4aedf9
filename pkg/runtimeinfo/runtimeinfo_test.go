package runtimeinfo_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/internal/natstest"
	"github.com/novaflow/nova/pkg/runtimeinfo"
)

const python = "/usr/bin/python3"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 races in its async publish: its cleanup can clear the
		// status channel before the goroutine it started reads it.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

var (
	genOnce sync.Once
	genInfo *runtimeinfo.Info
	genErr  error
)

// generated indexes the real runtime once per test binary (about 2 s).
func generated(t *testing.T) *runtimeinfo.Info {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("no %s: %v", python, err)
	}
	genOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		genInfo, genErr = runtimeinfo.Generate(ctx, python)
	})
	if genErr != nil {
		t.Fatal(genErr)
	}
	return genInfo
}

func TestGenerateDescribesTheRuntime(t *testing.T) {
	info := generated(t)
	if !strings.HasPrefix(info.Python, "3.") {
		t.Errorf("python version %q", info.Python)
	}
	for _, m := range []string{"pandas", "fitz", "json", "requests", "PIL", "bs4", "lxml", "openpyxl", "pypdf", "numpy", "os.path", "collections.abc", "sys", "_thread"} {
		if !info.HasModule(m) {
			t.Errorf("HasModule(%q) = false", m)
		}
	}
	for _, m := range []string{"tensorflow", "torch", "pymupdf", "sklearn", "", "pandas2"} {
		if info.HasModule(m) {
			t.Errorf("HasModule(%q) = true", m)
		}
	}
	for _, lib := range []string{"fitz", "pandas", "requests", "PIL", "bs4", "json", "re", "datetime"} {
		l := info.Library(lib)
		if l == nil || l.Error != "" || len(l.Entries) == 0 || l.Version == "" {
			t.Errorf("library %s not documented: %+v", lib, l)
		}
	}
	if l := info.Library("pymupdf"); l == nil || l.Distribution != "PyMuPDF" {
		t.Errorf("alias pymupdf: %+v", l)
	}
	libs := info.InstalledLibraries()
	if !slices.ContainsFunc(libs, func(s string) bool { return strings.HasPrefix(s, "fitz (PyMuPDF ") }) {
		t.Errorf("InstalledLibraries = %v", libs)
	}
}

func TestGenerateFailsClearly(t *testing.T) {
	_, err := runtimeinfo.Generate(context.Background(), "/nonexistent/python3")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/python3") {
		t.Errorf("err = %v", err)
	}
	// A library that does not import is recorded, not fatal.
	info, err := runtimeinfo.Generate(context.Background(), python,
		runtimeinfo.WithLibraries(runtimeinfo.LibrarySpec{Name: "json"}, runtimeinfo.LibrarySpec{Name: "tensorflow"}))
	if err != nil {
		t.Fatal(err)
	}
	if l := info.Library("tensorflow"); l == nil || !strings.Contains(l.Error, "No module named") {
		t.Errorf("tensorflow: %+v", l)
	}
	if got := info.Search("json", "dumps", 1); len(got) != 1 || got[0].Name != "json.dumps" {
		t.Errorf("json dumps: %+v", got)
	}
}

func names(entries []runtimeinfo.DocEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name)
	}
	return out
}

func TestSearch(t *testing.T) {
	info := generated(t)
	tests := []struct {
		library, query string
		want           string // the name, or its end
		within         int
	}{
		{"fitz", "extract text from page", "fitz.Page.get_text", 3},
		{"pymupdf", "extract text from page", "fitz.Page.get_text", 3},
		{"", "pymupdf extract text from page", "fitz.Page.get_text", 3},
		{"fitz", "open a PDF document", "fitz.open", 3},
		{"pandas", "read csv", "pandas.read_csv", 1},
		{"pandas", "read_csv", "pandas.read_csv", 1},
		{"pd", "DataFrame.to_csv", "pandas.DataFrame.to_csv", 1},
		{"pandas", "group by", "pandas.DataFrame.groupby", 3},
		{"", "read csv", "pandas.read_csv", 1},
		{"Pillow", "resize image", "PIL.Image.Image.resize", 3},
		{"PIL.Image", "open", "PIL.Image.open", 1},
		{"beautifulsoup4", "find all tags", ".find_all", 3},
		{"requests", "send a GET request", "requests.get", 3},
		{"re", "search pattern in string", "re.search", 3},
		{"datetime", "parse a string with a format", "datetime.datetime.strptime", 3},
		{"json", "serialize to JSON", "json.dumps", 3},
	}
	for _, tt := range tests {
		t.Run(tt.library+"/"+tt.query, func(t *testing.T) {
			got := names(info.Search(tt.library, tt.query, tt.within))
			if !slices.ContainsFunc(got, func(n string) bool { return strings.HasSuffix(n, tt.want) }) {
				t.Errorf("Search(%q, %q) = %v, want %s in the first %d", tt.library, tt.query, got, tt.want, tt.within)
			}
		})
	}
	if got := info.Search("tensorflow", "tensor", 5); len(got) != 0 {
		t.Errorf("unknown library answered %v", names(got))
	}
	if got := info.Search("fitz", "zzzqqq", 5); len(got) != 0 {
		t.Errorf("nonsense query answered %v", names(got))
	}
	for _, e := range info.Search("", "extract text", 20) {
		if !strings.HasPrefix(e.Name, "fitz.") && !strings.HasPrefix(e.Name, "pypdf.") && !strings.Contains(e.Name, ".") {
			t.Errorf("odd entry %s", e.Name)
		}
	}
}

func TestFormat(t *testing.T) {
	info := generated(t)
	out := info.Format(info.Search("fitz", "extract text from page", 3))
	for _, want := range []string{"# fitz (PyMuPDF ", "fitz.Page.get_text(", "Extract text from a page"} {
		if !strings.Contains(out, want) {
			t.Errorf("Format lacks %q:\n%s", want, out)
		}
	}
	if out := info.Format(nil); !strings.Contains(out, "No matching documentation") || !strings.Contains(out, "pandas") {
		t.Errorf("Format(nil) = %q", out)
	}
	long := info.Format(info.Search("pandas", "read_csv", 1))
	if len(long) > 1200 {
		t.Errorf("read_csv formatted in %d bytes:\n%s", len(long), long)
	}
}

// jetStream starts an embedded JetStream server for one test.
func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t)
}

func TestPublishLoadRoundTrip(t *testing.T) {
	info := generated(t)
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := runtimeinfo.Load(ctx, js); !errors.Is(err, runtimeinfo.ErrNotPublished) {
		t.Fatalf("Load before publish: %v, want ErrNotPublished", err)
	}
	if err := runtimeinfo.Publish(ctx, js, info); err != nil {
		t.Fatal(err)
	}
	obj, err := js.ObjectStore(ctx, runtimeinfo.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := obj.GetInfo(ctx, runtimeinfo.Object)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Metadata["content-encoding"] != "gzip" || meta.Size > 1<<20 {
		t.Errorf("stored %d bytes, metadata %v: want gzip under 1 MiB", meta.Size, meta.Metadata)
	}

	got, err := runtimeinfo.Load(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if got.Python != info.Python || len(got.Modules) != len(info.Modules) || len(got.Libraries) != len(info.Libraries) || got.Digest == "" {
		t.Errorf("loaded python %s, %d modules, %d libraries, digest %q; published %s, %d, %d",
			got.Python, len(got.Modules), len(got.Libraries), got.Digest, info.Python, len(info.Modules), len(info.Libraries))
	}
	if !got.HasModule("fitz") || got.HasModule("tensorflow") {
		t.Error("loaded info answers HasModule wrongly")
	}
	if r := names(got.Search("pandas", "read csv", 1)); !slices.Equal(r, []string{"pandas.read_csv"}) {
		t.Errorf("loaded info Search = %v", r)
	}

	// A small description is stored as plain JSON.
	small := &runtimeinfo.Info{Python: "3.0.0", Modules: []string{"json"}}
	if err := runtimeinfo.Publish(ctx, js, small); err != nil {
		t.Fatal(err)
	}
	got, err = runtimeinfo.Load(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if got.Python != "3.0.0" || !got.HasModule("json") || got.HasModule("fitz") {
		t.Errorf("republished info not loaded: %+v", got)
	}
}

func TestCacheFollowsPublications(t *testing.T) {
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := runtimeinfo.NewCache(js)
	c.RetryMissing, c.Refresh = time.Hour, time.Hour
	if _, err := c.Get(ctx); !errors.Is(err, runtimeinfo.ErrNotPublished) {
		t.Fatalf("Get before publish: %v", err)
	}
	if err := runtimeinfo.Publish(ctx, js, &runtimeinfo.Info{Python: "3.0.1", Modules: []string{"json"}}); err != nil {
		t.Fatal(err)
	}
	// Not looked at again before RetryMissing.
	if _, err := c.Get(ctx); !errors.Is(err, runtimeinfo.ErrNotPublished) {
		t.Fatalf("Get within RetryMissing: %v", err)
	}
	c.RetryMissing = 0
	info, err := c.Get(ctx)
	if err != nil || info.Python != "3.0.1" {
		t.Fatalf("Get after publish: %v, %v", info, err)
	}
	if err := runtimeinfo.Publish(ctx, js, &runtimeinfo.Info{Python: "3.0.2", Modules: []string{"json", "fitz"}}); err != nil {
		t.Fatal(err)
	}
	if info, _ := c.Get(ctx); info.Python != "3.0.1" {
		t.Errorf("refreshed before Refresh: %s", info.Python)
	}
	c.Refresh = 0
	if info, err := c.Get(ctx); err != nil || info.Python != "3.0.2" || !info.HasModule("fitz") {
		t.Errorf("republished description not picked up: %+v, %v", info, err)
	}
}
