package codecache

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// The semantic level. After an exact miss, a task is compared with the tasks
// of the entries that share everything else of its key (node type, decision
// values, context shape, model, language, runtime): their group. Each group
// has one index record in the bucket holding every member's task embedding,
// so a lookup reads one record, not the bucket. The cosine similarity of the
// task's embedding with each member's decides; the most similar member at or
// above the threshold whose task names the same literals (numbers, quoted
// strings, identifiers) wins. Embeddings of tasks are kept in the bucket too,
// so each distinct (embedding model, task) is embedded once.
//
// Keys: an entry's is Key (64 hex digits), a group's index record is
// "semantic.<group>", a kept embedding "embedding.<sha256>". Everything
// expires with the bucket's TTL.

const (
	indexPrefix     = "semantic."
	embeddingPrefix = "embedding."
)

// DefaultSimilarity is the threshold of a semantic hit unless configured.
const DefaultSimilarity = 0.92

// Index limits: a group keeps at most MaxIndexEntries members and an index
// record at most maxIndexBytes (a NATS message is 1 MiB by default); the
// oldest members go first.
const (
	MaxIndexEntries = 256
	maxIndexBytes   = 512 << 10
)

// SemanticSettings configure the semantic level; embed them in a service's
// config.
type SemanticSettings struct {
	// Enabled turns the semantic level on (the exact level is always on).
	Enabled bool `env:"NOVA_CODECACHE_SEMANTIC" default:"false"`
	// Similarity is the cosine similarity a cached task's embedding must
	// reach (0 < s <= 1).
	Similarity float64 `env:"NOVA_CODECACHE_SIMILARITY" default:"0.92"`
	// EmbeddingModel embeds tasks (POST {OPENAI_BASE_URL}/embeddings).
	EmbeddingModel string `env:"NOVA_LLM_EMBEDDING_MODEL" default:"text-embedding-3-small"`
	// Timeout bounds one embeddings call; past it the lookup is a miss.
	Timeout time.Duration `env:"NOVA_CODECACHE_EMBEDDING_TIMEOUT" default:"10s"`
}

// Validate names the setting that cannot work.
func (s SemanticSettings) Validate() error {
	if !s.Enabled {
		return nil
	}
	if !(s.Similarity > 0 && s.Similarity <= 1) {
		return fmt.Errorf("NOVA_CODECACHE_SIMILARITY=%v: want a cosine similarity above 0 and at most 1, such as %v", s.Similarity, DefaultSimilarity)
	}
	if strings.TrimSpace(s.EmbeddingModel) == "" {
		return errors.New("NOVA_LLM_EMBEDDING_MODEL: the semantic level (NOVA_CODECACHE_SEMANTIC) needs an embedding model")
	}
	return nil
}

// IsEntryKey tells an entry's key from the index records and kept
// embeddings that share the bucket.
func IsEntryKey(k string) bool {
	if len(k) != 64 {
		return false
	}
	for _, c := range k {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IndexKey is the key of group's index record.
func IndexKey(group string) string { return indexPrefix + group }

// EmbeddingKey is the key of the kept embedding of text by model.
func EmbeddingKey(model, text string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s;%s", len(model), model, text)
	return embeddingPrefix + hex.EncodeToString(h.Sum(nil))
}

var (
	numberLiteral = regexp.MustCompile(`\d+(?:[.,]\d+)*`)
	// A quote opens after a non-word character and closes before one, so
	// that apostrophes ("the customer's total") quote nothing.
	quotedLiteral = regexp.MustCompile("(?:^|[^\\p{L}\\p{N}])(?:'([^'\\n]*)'|\"([^\"\\n]*)\"|`([^`\\n]*)`)")
	wordLiteral   = regexp.MustCompile(`[\p{L}_][\p{L}\p{N}_]*`)
)

// Literals are what of a task its code must match exactly and embeddings
// barely tell apart: numbers ("10%" is not "15%"), quoted strings ('EUR'),
// and identifiers, words with an underscore or an inner capital
// (final_total, netTotal). Sorted, without repeats; a semantic hit needs the
// same literals.
func Literals(task string) []string {
	var out []string
	for _, m := range quotedLiteral.FindAllStringSubmatch(task, -1) {
		out = append(out, "q:"+m[1]+m[2]+m[3])
	}
	unquoted := quotedLiteral.ReplaceAllString(task, " ")
	for _, n := range numberLiteral.FindAllString(unquoted, -1) {
		out = append(out, "n:"+n)
	}
	for _, w := range wordLiteral.FindAllString(unquoted, -1) {
		if identifier(w) {
			out = append(out, "i:"+w)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func identifier(w string) bool {
	if strings.Contains(strings.Trim(w, "_"), "_") {
		return true
	}
	r := []rune(w)
	for i := 1; i < len(r); i++ {
		if unicode.IsUpper(r[i]) && unicode.IsLower(r[i-1]) {
			return true
		}
	}
	return false
}

// Cosine is the cosine similarity of a and b; 0 when their lengths differ
// or one is zero.
func Cosine(a, b []float32) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot += x * y
		na += x * x
		nb += y * y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// Vector is an embedding kept in an index record, quantized to one signed
// byte per dimension (scaled by its largest component): a quarter of the
// bytes of float32, and a cosine similarity within about 0.001 of the exact
// one. JSON: base64 of the bytes.
type Vector []int8

// Quantize is v as a Vector.
func Quantize(v []float32) Vector {
	var m float64
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	q := make(Vector, len(v))
	if m == 0 {
		return q
	}
	for i, x := range v {
		q[i] = int8(math.Round(float64(x) / m * 127))
	}
	return q
}

// Floats is the vector as float32 (up to the quantization's scale, which
// cosine similarity does not see).
func (q Vector) Floats() []float32 {
	out := make([]float32, len(q))
	for i, x := range q {
		out[i] = float32(x)
	}
	return out
}

// MarshalJSON writes base64.
func (q Vector) MarshalJSON() ([]byte, error) {
	b := make([]byte, len(q))
	for i, x := range q {
		b[i] = byte(x)
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON reads base64.
func (q *Vector) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	*q = make(Vector, len(b))
	for i, x := range b {
		(*q)[i] = int8(x)
	}
	return nil
}

// IndexEntry is one member of a group: an entry's key, its task's literals
// and its task's embedding.
type IndexEntry struct {
	Key      string    `json:"key"`
	Literals []string  `json:"literals"`
	Vector   Vector    `json:"vector"`
	AddedAt  time.Time `json:"added_at"`
}

// Index is a group's index record.
type Index struct {
	EmbeddingModel string       `json:"embedding_model"`
	Entries        []IndexEntry `json:"entries"`
}

// Put adds e, replacing a member of the same key, and drops the oldest
// members beyond the limits.
func (x *Index) Put(e IndexEntry) {
	x.Remove(e.Key)
	x.Entries = append(x.Entries, e)
	slices.SortStableFunc(x.Entries, func(a, b IndexEntry) int { return a.AddedAt.Compare(b.AddedAt) })
	if n := len(x.Entries) - MaxIndexEntries; n > 0 {
		x.Entries = slices.Delete(x.Entries, 0, n)
	}
	for len(x.Entries) > 1 {
		b, err := json.Marshal(x)
		if err != nil || len(b) <= maxIndexBytes {
			return
		}
		x.Entries = slices.Delete(x.Entries, 0, 1)
	}
}

// Remove drops the member of key and says whether there was one.
func (x *Index) Remove(key string) bool {
	n := len(x.Entries)
	x.Entries = slices.DeleteFunc(x.Entries, func(e IndexEntry) bool { return e.Key == key })
	return len(x.Entries) != n
}

// Rank compares the embedding of a task with literals with every member.
func (x *Index) Rank(query []float32, literals []string, threshold float64) Ranking {
	var r Ranking
	for _, e := range x.Entries {
		s := Cosine(query, e.Vector.Floats())
		r.Compared++
		same := slices.Equal(e.Literals, literals)
		if s > r.Best.Similarity {
			r.Best, r.OtherLiterals = Match{Key: e.Key, Similarity: s}, !same
		}
		if s >= threshold && same {
			r.Matches = append(r.Matches, Match{Key: e.Key, Similarity: s})
		}
	}
	slices.SortStableFunc(r.Matches, func(a, b Match) int { return cmp.Compare(b.Similarity, a.Similarity) })
	return r
}

// LoadIndex reads group's index record; nil when the group has none.
func LoadIndex(ctx context.Context, kv jetstream.KeyValue, group string) (*Index, error) {
	x, _, err := loadIndex(ctx, kv, group)
	return x, err
}

func loadIndex(ctx context.Context, kv jetstream.KeyValue, group string) (*Index, uint64, error) {
	entry, err := kv.Get(ctx, IndexKey(group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read semantic index %s: %w", group, err)
	}
	x := &Index{}
	if err := json.Unmarshal(entry.Value(), x); err != nil {
		return nil, 0, fmt.Errorf("semantic index %s unreadable: %w", group, err)
	}
	return x, entry.Revision(), nil
}

// UpdateIndex applies fn to group's index record (an empty one when there
// is none) with compare-and-set, until it holds; fn returns false to leave
// the record as it is. A record left without members is deleted.
func UpdateIndex(ctx context.Context, kv jetstream.KeyValue, group string, fn func(*Index) bool) error {
	for range 100 {
		x, rev, err := loadIndex(ctx, kv, group)
		if err != nil {
			return err
		}
		if x == nil {
			x = &Index{}
		}
		if !fn(x) {
			return nil
		}
		switch {
		case len(x.Entries) == 0 && rev == 0:
			return nil
		case len(x.Entries) == 0:
			err = kv.Delete(ctx, IndexKey(group), jetstream.LastRevision(rev))
		default:
			var data []byte
			if data, err = json.Marshal(x); err != nil {
				return err
			}
			if rev == 0 {
				_, err = kv.Create(ctx, IndexKey(group), data)
			} else {
				_, err = kv.Update(ctx, IndexKey(group), data, rev)
			}
		}
		if err == nil {
			return nil
		}
		if !bus.LostRace(err) {
			return fmt.Errorf("update semantic index %s: %w", group, err)
		}
		// Another writer got there first: read again.
	}
	return fmt.Errorf("semantic index %s: too many concurrent updates", group)
}

// keptEmbedding is the stored form of a task's embedding.
type keptEmbedding struct {
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	// Vector is base64 of little-endian float32s.
	Vector string `json:"vector"`
}

// LoadEmbedding reads the kept embedding of text by model; nil when there
// is none.
func LoadEmbedding(ctx context.Context, kv jetstream.KeyValue, model, text string) ([]float32, error) {
	entry, err := kv.Get(ctx, EmbeddingKey(model, text))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kept embedding: %w", err)
	}
	var k keptEmbedding
	if err := json.Unmarshal(entry.Value(), &k); err != nil {
		return nil, fmt.Errorf("kept embedding unreadable: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(k.Vector)
	if err != nil || len(b) != 4*k.Dimensions || k.Dimensions == 0 {
		return nil, fmt.Errorf("kept embedding unreadable: %d bytes for %d dimensions (%v)", len(b), k.Dimensions, err)
	}
	v := make([]float32, k.Dimensions)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// StoreEmbedding keeps the embedding v of text by model.
func StoreEmbedding(ctx context.Context, kv jetstream.KeyValue, model, text string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	data, err := json.Marshal(keptEmbedding{Model: model, Dimensions: len(v), Vector: base64.StdEncoding.EncodeToString(b)})
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, EmbeddingKey(model, text), data); err != nil {
		return fmt.Errorf("keep embedding: %w", err)
	}
	return nil
}
