package codecache

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/novaflow/nova/pkg/internal/natstest"
)

func TestLiterals(t *testing.T) {
	tests := []struct {
		task string
		want []string
	}{
		{"Calculate discount (10% if total > 1000)", []string{"n:10", "n:1000"}},
		{"Calculate the discount (10% when total > 1000)", []string{"n:10", "n:1000"}},
		{"if total > 1000 take 10% off", []string{"n:10", "n:1000"}},
		{"Set status to 'approved'", []string{"q:approved"}},
		{`Set status to "rejected" and total to 1,500.50`, []string{"n:1,500.50", "q:rejected"}},
		{"Store it in final_total, not netTotal or Total", []string{"i:final_total", "i:netTotal"}},
		{"the customer's total and the vendor's name", nil},
		{"Summarize the invoice", nil},
		{"Write `result` and `result` again, 3 times", []string{"n:3", "q:result"}},
	}
	for _, tc := range tests {
		if got := Literals(tc.task); !slices.Equal(got, tc.want) {
			t.Errorf("Literals(%q) = %q, want %q", tc.task, got, tc.want)
		}
	}
}

func TestCosineAndQuantize(t *testing.T) {
	if got := Cosine([]float32{1, 0}, []float32{0, 1}); got != 0 {
		t.Errorf("orthogonal: %v", got)
	}
	if got := Cosine([]float32{1, 2, 3}, []float32{2, 4, 6}); math.Abs(got-1) > 1e-9 {
		t.Errorf("parallel: %v", got)
	}
	if got := Cosine([]float32{1, 2}, []float32{1, 2, 3}); got != 0 {
		t.Errorf("lengths differ: %v, want 0", got)
	}
	if got := Cosine([]float32{0, 0}, []float32{1, 2}); got != 0 {
		t.Errorf("zero vector: %v, want 0", got)
	}
	// Quantized vectors keep the similarity of real-sized embeddings to
	// within 0.002, and survive JSON.
	r := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for range 200 {
		a, b := make([]float32, 1536), make([]float32, 1536)
		for i := range a {
			a[i] = float32(r.NormFloat64())
			b[i] = a[i] + float32(r.NormFloat64()*r.Float64())
		}
		var q Vector
		data, err := json.Marshal(Quantize(b))
		if err != nil || json.Unmarshal(data, &q) != nil {
			t.Fatalf("JSON of a vector: %v", err)
		}
		worst = max(worst, math.Abs(Cosine(a, b)-Cosine(a, q.Floats())))
	}
	if worst > 0.002 {
		t.Errorf("quantization moved a similarity by %v, want at most 0.002", worst)
	}
}

func unit(dims int, at ...int) []float32 {
	v := make([]float32, dims)
	for _, i := range at {
		v[i] = 1
	}
	return v
}

func TestIndexRank(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	x := &Index{}
	// b is nearest to the query (cosine 0.98), a next (0.94), c below the
	// threshold, d as near as b but naming other numbers.
	query := []float32{1, 0, 0, 0}
	x.Put(IndexEntry{Key: "a", Literals: []string{"n:10"}, Vector: Quantize([]float32{0.94, 0.341, 0, 0}), AddedAt: t0})
	x.Put(IndexEntry{Key: "b", Literals: []string{"n:10"}, Vector: Quantize([]float32{0.98, 0, 0.199, 0}), AddedAt: t0.Add(time.Second)})
	x.Put(IndexEntry{Key: "c", Literals: []string{"n:10"}, Vector: Quantize([]float32{0.5, 0.866, 0, 0}), AddedAt: t0.Add(2 * time.Second)})
	x.Put(IndexEntry{Key: "d", Literals: []string{"n:15"}, Vector: Quantize([]float32{0.99, 0, 0, 0.141}), AddedAt: t0.Add(3 * time.Second)})
	r := x.Rank(query, []string{"n:10"}, 0.92)
	var keys []string
	for _, m := range r.Matches {
		keys = append(keys, m.Key)
	}
	if !slices.Equal(keys, []string{"b", "a"}) || r.Compared != 4 {
		t.Errorf("matches %v of %d compared, want [b a] of 4", r.Matches, r.Compared)
	}
	if r.Best.Key != "d" || !r.OtherLiterals || math.Abs(r.Best.Similarity-0.99) > 0.002 {
		t.Errorf("best %+v (other literals %v), want d at 0.99 with other literals", r.Best, r.OtherLiterals)
	}
	if r := x.Rank(query, []string{"n:10"}, 0.99); len(r.Matches) != 0 {
		t.Errorf("threshold 0.99: matches %v, want none", r.Matches)
	}
	if r := x.Rank([]float32{1, 0}, nil, 0.5); len(r.Matches) != 0 || r.Best.Similarity != 0 {
		t.Errorf("a query of another length: %+v, want nothing similar", r)
	}

	// Put replaces a member of the same key; Remove drops it.
	x.Put(IndexEntry{Key: "a", Literals: []string{"n:10"}, Vector: Quantize([]float32{0, 1, 0, 0}), AddedAt: t0.Add(4 * time.Second)})
	if len(x.Entries) != 4 || x.Entries[3].Key != "a" {
		t.Errorf("after putting a again: %v", x.Entries)
	}
	if !x.Remove("a") || x.Remove("a") || len(x.Entries) != 3 {
		t.Errorf("remove: %v", x.Entries)
	}
}

func TestIndexLimits(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	x := &Index{}
	for i := range MaxIndexEntries + 10 {
		x.Put(IndexEntry{Key: fmt.Sprint(i), Vector: Quantize(unit(8, i%8)), AddedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	if len(x.Entries) != MaxIndexEntries || x.Entries[0].Key != "10" {
		t.Errorf("%d members, oldest %s; want %d, the oldest 10 dropped", len(x.Entries), x.Entries[0].Key, MaxIndexEntries)
	}
	// Large embeddings: the record stays under its byte limit.
	x = &Index{}
	for i := range 200 {
		x.Put(IndexEntry{Key: fmt.Sprint(i), Vector: Quantize(unit(3072, i)), AddedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	data, _ := json.Marshal(x)
	if len(data) > maxIndexBytes || len(x.Entries) < 100 || x.Entries[len(x.Entries)-1].Key != "199" {
		t.Errorf("3072 dimensions: %d members in %d bytes, newest %s", len(x.Entries), len(data), x.Entries[len(x.Entries)-1].Key)
	}
}

func TestGroup(t *testing.T) {
	base := Input{Task: "Calculate discount (10% if total > 1000)", NodeType: "action", Shape: `{"total":number}`, Model: "gpt-4o",
		Language: "python", Runtime: "python-3.11.2-0123456789abcdef"}
	g := Group(base, "text-embedding-3-small")
	same := base
	same.Task = "Calculate the discount (10% when total > 1000)"
	if Group(same, "text-embedding-3-small") != g {
		t.Error("the task changed the group")
	}
	if Key(same) == Key(base) {
		t.Error("the task did not change the key")
	}
	for name, change := range map[string]func(*Input){
		"node type": func(in *Input) { in.NodeType = "decision" },
		"decision":  func(in *Input) { in.DecisionValues = []string{"yes", "no"} },
		"shape":     func(in *Input) { in.Shape = `{"currency":string,"total":number}` },
		"model":     func(in *Input) { in.Model = "gpt-4o-mini" },
		"language":  func(in *Input) { in.Language = "javascript" },
		"runtime":   func(in *Input) { in.Runtime = "python-3.12.0-0123456789abcdef" },
	} {
		in := base
		change(&in)
		if Group(in, "text-embedding-3-small") == g {
			t.Errorf("another %s, the same group", name)
		}
	}
	if Group(base, "text-embedding-3-large") == g {
		t.Error("another embedding model, the same group")
	}
	if !IsEntryKey(Key(base)) || IsEntryKey(IndexKey(g)) || IsEntryKey(EmbeddingKey("m", "t")) || IsEntryKey(strings.ToUpper(Key(base))) {
		t.Error("IsEntryKey does not tell entries from the other keys")
	}
}

func TestSemanticSettings(t *testing.T) {
	ok := SemanticSettings{Enabled: true, Similarity: 0.92, EmbeddingModel: "text-embedding-3-small"}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	for _, s := range []SemanticSettings{
		{Enabled: true, Similarity: 0, EmbeddingModel: "m"},
		{Enabled: true, Similarity: 1.2, EmbeddingModel: "m"},
		{Enabled: true, Similarity: math.NaN(), EmbeddingModel: "m"},
		{Enabled: true, Similarity: 0.9, EmbeddingModel: " "},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if err := (SemanticSettings{Similarity: 7}).Validate(); err != nil {
		t.Errorf("off, yet refused: %v", err)
	}
}

func keyValue(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := natstest.JetStream(t).CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: Bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestIndexInKV: concurrent writers of one group's index (engine replicas
// storing entries at once) lose no member; the last member's removal
// deletes the record; kept embeddings read back exactly.
func TestIndexInKV(t *testing.T) {
	ctx := t.Context()
	kv := keyValue(t)
	group := Group(Input{Task: "t", Shape: "{}"}, "m")
	if x, err := LoadIndex(ctx, kv, group); x != nil || err != nil {
		t.Fatalf("no record yet: %v, %v", x, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			errs <- UpdateIndex(ctx, kv, group, func(x *Index) bool {
				x.EmbeddingModel = "m"
				x.Put(IndexEntry{Key: fmt.Sprintf("k%02d", i), Vector: Quantize(unit(16, i)), AddedAt: time.Unix(int64(i), 0)})
				return true
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	x, err := LoadIndex(ctx, kv, group)
	if err != nil || x == nil || len(x.Entries) != 16 || x.EmbeddingModel != "m" {
		t.Fatalf("after 16 concurrent puts: %+v, %v", x, err)
	}
	if r := x.Rank(unit(16, 5), nil, 0.99); len(r.Matches) != 1 || r.Matches[0].Key != "k05" {
		t.Errorf("rank after the round trip: %+v", r)
	}
	for i := range 16 {
		key := fmt.Sprintf("k%02d", i)
		if err := UpdateIndex(ctx, kv, group, func(x *Index) bool { return x.Remove(key) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Get(ctx, IndexKey(group)); err != jetstream.ErrKeyNotFound {
		t.Errorf("the record of an emptied group: %v, want it deleted", err)
	}
	// A group can be filled again after its record was deleted.
	if err := UpdateIndex(ctx, kv, group, func(x *Index) bool { x.Put(IndexEntry{Key: "again", Vector: Quantize(unit(4, 0))}); return true }); err != nil {
		t.Fatal(err)
	}
	if x, _ := LoadIndex(ctx, kv, group); x == nil || len(x.Entries) != 1 {
		t.Errorf("refilled group: %+v", x)
	}

	v := []float32{0.1, -0.25, float32(math.Pi), 1e-7}
	if got, err := LoadEmbedding(ctx, kv, "m", "a task"); got != nil || err != nil {
		t.Errorf("no kept embedding yet: %v, %v", got, err)
	}
	if err := StoreEmbedding(ctx, kv, "m", "a task", v); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadEmbedding(ctx, kv, "m", "a task"); err != nil || !slices.Equal(got, v) {
		t.Errorf("kept embedding: %v, %v; want %v", got, err, v)
	}
	if got, _ := LoadEmbedding(ctx, kv, "other-model", "a task"); got != nil {
		t.Errorf("another model's embedding of the same task: %v, want none", got)
	}
}
