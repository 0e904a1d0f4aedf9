// Package runtimeinfo describes the sandbox's Python runtime: which modules
// node code can import, and the documentation (signatures and docstring
// summaries) of the libraries it is expected to use. The sandbox generates it
// from its own interpreter at start-up and publishes it in a JetStream Object
// Store; the code validator reads it to check imports, and the code generator's
// search_documentation tool answers from it instead of from the network.
package runtimeinfo

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// Bucket is the Object Store bucket holding runtime descriptions, and Object
// the name of the Python runtime's.
const (
	Bucket = "nova_runtime"
	Object = "python"
)

// ErrNotPublished is returned by Load when no runtime description has been
// published yet (no sandbox has started).
var ErrNotPublished = errors.New("runtime info not published")

//go:embed indexer.py
var indexerScript string

// LibrarySpec names a library to document: its top-level import name and the
// submodules to index besides it (PIL's API lives in PIL.Image, not PIL).
type LibrarySpec struct {
	Name    string   `json:"name"`
	Modules []string `json:"modules,omitempty"`
}

// DefaultLibraries are the libraries node code is expected to use: those the
// sandbox image installs and the standard modules generated code reaches for.
var DefaultLibraries = []LibrarySpec{
	{Name: "fitz"},
	{Name: "pandas"},
	{Name: "numpy", Modules: []string{"numpy.linalg", "numpy.random"}},
	{Name: "requests"},
	{Name: "PIL", Modules: []string{"PIL.Image", "PIL.ImageDraw", "PIL.ImageFont", "PIL.ImageOps", "PIL.ImageFilter", "PIL.ImageEnhance"}},
	{Name: "bs4"},
	{Name: "lxml", Modules: []string{"lxml.etree", "lxml.html"}},
	{Name: "openpyxl", Modules: []string{"openpyxl.worksheet.worksheet", "openpyxl.styles", "openpyxl.utils"}},
	{Name: "pypdf"},
	{Name: "json"},
	{Name: "re"},
	{Name: "datetime"},
	{Name: "math"},
	{Name: "base64"},
	{Name: "io"},
	{Name: "csv"},
	{Name: "statistics"},
	{Name: "collections"},
	{Name: "itertools"},
}

// Info describes a Python runtime.
type Info struct {
	// Python is the interpreter's version, e.g. "3.11.2".
	Python string `json:"python"`
	// Modules are the top-level names that can be imported, sorted.
	Modules   []string  `json:"modules"`
	Libraries []Library `json:"libraries"`
	// GeneratedAt is when the description was made.
	GeneratedAt time.Time `json:"generated_at"`
	// Digest identifies the published object Load read (empty otherwise).
	Digest string `json:"-"`

	once    sync.Once
	modules map[string]struct{}
	index   []indexed
}

// Library is one documented library.
type Library struct {
	// Name is the top-level import name ("fitz", "PIL").
	Name string `json:"name"`
	// Distribution is the installed package ("PyMuPDF", "Pillow"), or
	// "python" for the standard library.
	Distribution string     `json:"distribution,omitempty"`
	Version      string     `json:"version,omitempty"`
	Entries      []DocEntry `json:"entries,omitempty"`
	// Error says why the library could not be imported (then it has no entries).
	Error string `json:"error,omitempty"`
}

// DocEntry documents one function, class, method or property.
type DocEntry struct {
	// Name is qualified from the import name: "fitz.Page.get_text".
	Name string `json:"name"`
	// Kind is "function", "class", "method" or "property".
	Kind      string `json:"kind,omitempty"`
	Signature string `json:"signature,omitempty"`
	// Doc is the docstring's first paragraph, shortened.
	Doc string `json:"doc,omitempty"`
	// Deprecated is set when the docstring says so.
	Deprecated bool `json:"deprecated,omitempty"`
}

type options struct {
	libraries []LibrarySpec
	timeout   time.Duration
	replicas  int
	maxDoc    int
	maxEntry  int
}

// Option tunes Generate or Publish.
type Option func(*options)

// WithLibraries replaces DefaultLibraries.
func WithLibraries(libs ...LibrarySpec) Option { return func(o *options) { o.libraries = libs } }

// WithTimeout bounds the indexer run (default 2 minutes).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithReplicas sets the bucket's replicas when Publish creates it (default 1).
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

func apply(opts []Option) options {
	o := options{libraries: DefaultLibraries, timeout: 2 * time.Minute, replicas: 1, maxDoc: 600, maxEntry: 4000}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// Generate describes the runtime of the interpreter at python by running the
// embedded indexer with it. The indexer imports the installed libraries and
// reads their docstrings; it runs no user code.
func Generate(ctx context.Context, python string, opts ...Option) (*Info, error) {
	o := apply(opts)
	spec, err := json.Marshal(map[string]any{
		"libraries": o.libraries, "max_doc": o.maxDoc, "max_entries": o.maxEntry, "max_members": 400,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// -I: no user site directory, no PYTHON* variables, no current directory
	// on the path, so what is described is the runtime as installed.
	cmd := exec.CommandContext(ctx, python, "-I", "-c", indexerScript, string(spec))
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return nil, fmt.Errorf("index python runtime %s: %w", python, err)
	}
	info := &Info{}
	if err := json.Unmarshal(stdout.Bytes(), info); err != nil {
		return nil, fmt.Errorf("index python runtime %s: decode indexer output: %w", python, err)
	}
	info.GeneratedAt = time.Now().UTC()
	return info, nil
}

// compressAbove is the encoded size from which Publish gzips the description
// (the full index is about 1.3 MB of JSON, 200 KB compressed).
const compressAbove = 64 << 10

// Publish stores info as object "python" of bucket "nova_runtime", creating
// the bucket if needed. Replicas publishing at once store the same content.
func Publish(ctx context.Context, js jetstream.JetStream, info *Info, opts ...Option) error {
	o := apply(opts)
	data, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("publish runtime info: %w", err)
	}
	meta := jetstream.ObjectMeta{Name: Object, Description: "Python runtime of the sandbox: modules and library documentation (JSON)"}
	if len(data) > compressAbove {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(data); err != nil {
			return fmt.Errorf("publish runtime info: %w", err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("publish runtime info: %w", err)
		}
		data = buf.Bytes()
		meta.Metadata = map[string]string{"content-encoding": "gzip"}
	}
	var obj jetstream.ObjectStore
	err = bus.Declare(ctx, "object store "+Bucket, func(ctx context.Context) (err error) {
		obj, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      Bucket,
			Description: "NOVA runtime descriptions, published by the sandbox",
			Storage:     jetstream.FileStorage,
			Replicas:    max(o.replicas, 1),
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("open object store %s: %w", Bucket, err)
	}
	if _, err := obj.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("publish runtime info: %w", err)
	}
	return nil
}

// Load reads the published description; ErrNotPublished when there is none.
func Load(ctx context.Context, js jetstream.JetStream) (*Info, error) {
	obj, err := js.ObjectStore(ctx, Bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, ErrNotPublished
		}
		return nil, fmt.Errorf("open object store %s: %w", Bucket, err)
	}
	res, err := obj.Get(ctx, Object)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, ErrNotPublished
		}
		return nil, fmt.Errorf("load runtime info: %w", err)
	}
	defer res.Close()
	meta, err := res.Info()
	if err != nil {
		return nil, fmt.Errorf("load runtime info: %w", err)
	}
	data, err := io.ReadAll(res)
	if err != nil {
		return nil, fmt.Errorf("load runtime info: %w", err)
	}
	if meta.Metadata["content-encoding"] == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("load runtime info: %w", err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("load runtime info: %w", err)
		}
	}
	info := &Info{}
	if err := json.Unmarshal(data, info); err != nil {
		return nil, fmt.Errorf("load runtime info: %w", err)
	}
	info.Digest = meta.Digest
	return info, nil
}

// HasModule reports whether the top-level package of a dotted import name
// ("os.path" -> "os") can be imported in the runtime.
func (i *Info) HasModule(name string) bool {
	i.build()
	top, _, _ := strings.Cut(strings.TrimSpace(name), ".")
	_, ok := i.modules[top]
	return ok
}

// Library returns the documented library an import name or alias refers to
// ("pymupdf" -> fitz, "pillow" -> PIL); nil when it is not documented.
func (i *Info) Library(name string) *Library {
	want := resolveLibrary(name)
	for k := range i.Libraries {
		if strings.EqualFold(i.Libraries[k].Name, want) {
			return &i.Libraries[k]
		}
	}
	return nil
}

// build prepares the lookup structures once, after decoding.
func (i *Info) build() {
	i.once.Do(func() {
		i.modules = make(map[string]struct{}, len(i.Modules))
		for _, m := range i.Modules {
			i.modules[m] = struct{}{}
		}
		i.index = buildIndex(i.Libraries)
	})
}

// InstalledLibraries lists the documented libraries that import, as
// "fitz (PyMuPDF 1.21.1)", for messages to the model.
func (i *Info) InstalledLibraries() []string {
	var out []string
	for _, l := range i.Libraries {
		if l.Error != "" || l.Distribution == "python" {
			continue
		}
		s := l.Name
		switch {
		case l.Distribution != "" && !strings.EqualFold(l.Distribution, l.Name):
			s += " (" + strings.TrimSpace(l.Distribution+" "+l.Version) + ")"
		case l.Version != "":
			s += " " + l.Version
		}
		out = append(out, s)
	}
	return slices.Clip(out)
}

// tailBuffer keeps the last max bytes written: the end of a traceback says
// what went wrong.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
