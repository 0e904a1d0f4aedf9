// Package contextsummary describes a workflow context to a model without
// showing it the data: per key its type, size and a short sample. Models
// write code that reads the real values at run time, so they need the shape
// of the context, not its bytes. Base64 and binary strings are never
// sampled, large-value references are never resolved, and secrets are
// never shown: the values of secret-looking keys (redact.IsSecretKey) and
// strings that are a secret by their look (redact.Text) are listed as
// present so code can still read them; a secret inside a longer text is
// replaced by [REDACTED] in its sample.
package contextsummary

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/valueref"
)

// Type is the JSON type of a value, or reference for a large value stored
// in the Object Store.
type Type string

// Types of values.
const (
	TypeString    Type = "string"
	TypeNumber    Type = "number"
	TypeBoolean   Type = "boolean"
	TypeNull      Type = "null"
	TypeObject    Type = "object"
	TypeArray     Type = "array"
	TypeReference Type = "reference"
	// TypeOther is a value JSON cannot represent.
	TypeOther Type = "unsupported"
)

// Defaults of Options.
const (
	DefaultSampleChars = 80
	DefaultMaxDepth    = 2
	DefaultMaxKeys     = 40
	// SmallStringChars bounds the strings OnlySmallScalars accepts.
	SmallStringChars = 200
	// base64MinChars is the length from which a string made only of base64
	// characters is taken for encoded data rather than text.
	base64MinChars = 100
	// maxChildren bounds the nested fields summarised per object, so a wide
	// object cannot blow up a prompt (its key list still names more).
	maxChildren = 20
)

// Options tune a summary; zero values mean the defaults.
type Options struct {
	// SampleChars is how much of a string is shown (default 80).
	SampleChars int
	// MaxDepth is how many levels below a top-level key are summarised
	// (default 2); deeper objects show only their key list.
	MaxDepth int
	// MaxKeys bounds an object's listed key names (default 40).
	MaxKeys int
}

func (o Options) withDefaults() Options {
	if o.SampleChars <= 0 {
		o.SampleChars = DefaultSampleChars
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	return o
}

// Field describes one value.
type Field struct {
	// Name is the key, or "[0]" for an array's first item.
	Name string
	Type Type
	// Size is the string length in characters, a reference's stored size,
	// or otherwise the length of the value's JSON in bytes. 0 for secrets.
	Size int64
	// Sample is a short rendering of the value (JSON syntax); empty when
	// the value is not shown (secret, encoded data, objects, arrays).
	Sample string
	// Truncated reports that Sample is a prefix of a longer string.
	Truncated bool
	// Secret reports a secret-looking key or a value that is a secret by
	// its look: present, value hidden.
	Secret bool
	// Encoded reports base64 or binary data (never sampled).
	Encoded bool
	// Note explains what the value is when it is not sampled, e.g.
	// "base64 data, 48213 chars (looks like a PDF)".
	Note string
	// Length is an object's key count or an array's item count.
	Length int
	// Keys are an object's key names, sorted, at most Options.MaxKeys.
	Keys []string
	// ItemTypes are the distinct types of an array's items.
	ItemTypes []Type
	// Fields are an object's values, or an array's first item, summarised
	// down to Options.MaxDepth.
	Fields []Field
}

// Small reports a number, boolean, null or short plain string: a value a
// model can see whole and that needs no analysis.
func (f Field) Small() bool {
	switch f.Type {
	case TypeNumber, TypeBoolean, TypeNull:
		return true
	case TypeString:
		return !f.Encoded && f.Size < SmallStringChars
	}
	return false
}

// Summary describes a context's top-level keys, sorted by name.
type Summary struct {
	Fields []Field
}

// Summarize describes ctx. Values are read, never modified; ctx may hold
// the shapes encoding/json and structpb.AsMap produce.
func Summarize(ctx map[string]any, opts Options) Summary {
	opts = opts.withDefaults()
	names := make([]string, 0, len(ctx))
	for k := range ctx {
		names = append(names, k)
	}
	slices.Sort(names)
	s := Summary{Fields: make([]Field, 0, len(names))}
	for _, k := range names {
		s.Fields = append(s.Fields, describe(k, ctx[k], 0, opts))
	}
	return s
}

// Keys are the context's top-level keys, sorted.
func (s Summary) Keys() []string {
	keys := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		keys[i] = f.Name
	}
	return keys
}

// Field finds a top-level key's description.
func (s Summary) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// OnlySmallScalars reports whether every value is a number, boolean, null
// or short plain string (no objects, arrays, references, encoded or long
// strings). An empty context qualifies. Secrets count by their real value.
func (s Summary) OnlySmallScalars() bool {
	for _, f := range s.Fields {
		if !f.Small() {
			return false
		}
	}
	return true
}

func describe(name string, v any, depth int, opts Options) Field {
	f := Field{Name: name, Type: typeOf(v)}
	if redact.IsSecretKey(name) {
		f.Secret = true
		// The size is kept only for OnlySmallScalars; it is never rendered.
		if s, ok := v.(string); ok {
			f.Size = int64(utf8.RuneCountInString(s))
			f.Encoded = looksEncoded(s)
		}
		return f
	}
	if r, ok := valueref.AsRef(v); ok {
		f.Type = TypeReference
		f.Size = r.Size
		f.Note = fmt.Sprintf("stored by reference, %d bytes, sha256 %s", r.Size, shortHash(r.SHA256))
		return f
	}
	switch t := v.(type) {
	case nil:
		f.Sample = "null"
		f.Size = 4
	case bool:
		f.Sample = strconv.FormatBool(t)
		f.Size = int64(len(f.Sample))
	case string:
		describeString(&f, t, opts)
	case map[string]any:
		describeObject(&f, t, depth, opts)
	case []any:
		describeArray(&f, t, depth, opts)
	default:
		if n, ok := number(v); ok {
			f.Sample = n
			f.Size = int64(len(n))
			if n == "" {
				f.Type = TypeOther
				f.Note = "a number JSON cannot represent (NaN or infinity)"
			}
			return f
		}
		// Other Go shapes (typed maps and slices): go through JSON.
		b, err := json.Marshal(v)
		if err != nil {
			f.Type = TypeOther
			f.Note = fmt.Sprintf("a %T value JSON cannot represent", v)
			return f
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			f.Type = TypeOther
			return f
		}
		return describe(name, generic, depth, opts)
	}
	return f
}

func typeOf(v any) Type {
	switch v.(type) {
	case nil:
		return TypeNull
	case bool:
		return TypeBoolean
	case string:
		return TypeString
	case map[string]any:
		return TypeObject
	case []any:
		return TypeArray
	}
	if _, ok := number(v); ok {
		return TypeNumber
	}
	return TypeOther
}

// number renders a numeric value; "" with ok for NaN and infinities.
func number(v any) (string, bool) {
	switch n := v.(type) {
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return "", true
		}
		return strconv.FormatFloat(n, 'f', -1, 64), true
	case float32:
		return number(float64(n))
	case int:
		return strconv.Itoa(n), true
	case int32:
		return strconv.FormatInt(int64(n), 10), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case uint:
		return strconv.FormatUint(uint64(n), 10), true
	case uint32:
		return strconv.FormatUint(uint64(n), 10), true
	case uint64:
		return strconv.FormatUint(n, 10), true
	case json.Number:
		return n.String(), true
	}
	return "", false
}

func describeString(f *Field, s string, opts Options) {
	f.Size = int64(utf8.RuneCountInString(s))
	shown, found := redact.Text(s)
	if found && strings.TrimSpace(shown) == redact.Placeholder {
		f.Secret = true // the value is a secret by its look, whatever its key
		return
	}
	if note := encodedNote(s); note != "" {
		f.Encoded = true
		f.Note = note
		return
	}
	// A secret inside text is never sampled; the text around it is.
	sample := shown
	if utf8.RuneCountInString(shown) > opts.SampleChars {
		sample = string([]rune(shown)[:opts.SampleChars])
		f.Truncated = true
	}
	f.Sample = quote(sample)
}

func describeObject(f *Field, m map[string]any, depth int, opts Options) {
	f.Length = len(m)
	f.Size = jsonSize(m)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	f.Keys = keys[:min(len(keys), opts.MaxKeys)]
	if depth >= opts.MaxDepth {
		return
	}
	for _, k := range keys[:min(len(keys), maxChildren)] {
		f.Fields = append(f.Fields, describe(k, m[k], depth+1, opts))
	}
}

func describeArray(f *Field, a []any, depth int, opts Options) {
	f.Length = len(a)
	f.Size = jsonSize(a)
	for _, item := range a {
		t := typeOf(item)
		if _, ok := valueref.AsRef(item); ok {
			t = TypeReference
		}
		if !slices.Contains(f.ItemTypes, t) {
			f.ItemTypes = append(f.ItemTypes, t)
		}
	}
	if len(a) > 0 && depth < opts.MaxDepth {
		f.Fields = []Field{describe("[0]", a[0], depth+1, opts)}
	}
}

// jsonSize is the length of v's JSON (0 when JSON cannot represent it).
func jsonSize(v any) int64 {
	var c countingWriter
	enc := json.NewEncoder(&c)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 0
	}
	return c.n - 1 // Encode's newline
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// looksEncoded reports base64 or binary data.
func looksEncoded(s string) bool { return encodedNote(s) != "" }

// encodedNote describes s when it is encoded or binary data, else "".
func encodedNote(s string) string {
	n := utf8.RuneCountInString(s)
	if strings.HasPrefix(s, "%PDF-") {
		return fmt.Sprintf("raw PDF data, %d chars", n)
	}
	if binaryLooking(s) {
		return fmt.Sprintf("binary data, %d bytes", len(s))
	}
	payload, mime := s, ""
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		if head, data, ok := strings.Cut(rest, ","); ok && strings.HasSuffix(head, ";base64") {
			payload, mime = data, strings.TrimSuffix(head, ";base64")
		}
	}
	if mime == "" && !strings.HasPrefix(s, "JVBERi0") && (n < base64MinChars || !base64Charset(s)) {
		return ""
	}
	note := fmt.Sprintf("base64 data, %d chars", n)
	if kind := sniff(payload); kind != "" {
		note += " (looks like " + kind + ")"
	} else if mime != "" {
		note += " (" + mime + ")"
	}
	return note
}

// binaryLooking reports text that is not text: invalid UTF-8, NUL bytes, or
// mostly control characters.
func binaryLooking(s string) bool {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return true
	}
	ctl, total := 0, 0
	for _, r := range s[:min(len(s), 4096)] {
		total++
		if unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' {
			ctl++
		}
	}
	return total > 0 && ctl*10 > total
}

func base64Charset(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9',
			c == '+', c == '/', c == '=', c == '-', c == '_', c == '\n', c == '\r':
		default:
			return false
		}
	}
	return true
}

// magic maps the first decoded bytes of common files to what they are.
var magic = []struct{ prefix, kind string }{
	{"%PDF", "a PDF"},
	{"\x89PNG", "a PNG image"},
	{"\xff\xd8\xff", "a JPEG image"},
	{"GIF8", "a GIF image"},
	{"PK\x03\x04", "a ZIP archive (or DOCX/XLSX)"},
	{"\x1f\x8b", "gzip data"},
	{"RIFF", "a RIFF file (WEBP/WAV)"},
}

func sniff(b64 string) string {
	head := strings.NewReplacer("\n", "", "\r", "", "-", "+", "_", "/").Replace(b64[:min(len(b64), 24)])
	head = head[:len(head)/4*4]
	raw, err := base64.StdEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	for _, m := range magic {
		if bytes.HasPrefix(raw, []byte(m.prefix)) {
			return m.kind
		}
	}
	return ""
}
