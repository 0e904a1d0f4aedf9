package runtimeinfo_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/novaflow/nova/pkg/runtimeinfo"
)

// TestGenerateCached: a runtime described once is read back from the cache,
// the same description; other options make another fingerprint; a damaged
// cache file is described again, not trusted.
func TestGenerateCached(t *testing.T) {
	dir := t.TempDir()
	libs := runtimeinfo.WithLibraries(runtimeinfo.LibrarySpec{Name: "json"})
	first, cached, err := runtimeinfo.GenerateCached(t.Context(), "/usr/bin/python3", dir, libs)
	if err != nil || cached {
		t.Fatalf("first description: cached %v, err %v", cached, err)
	}
	again, cached, err := runtimeinfo.GenerateCached(t.Context(), "/usr/bin/python3", dir, libs)
	if err != nil || !cached {
		t.Fatalf("second description: cached %v, err %v", cached, err)
	}
	if !slices.Equal(first.Modules, again.Modules) || first.Python != again.Python || len(again.Libraries) != 1 || again.Library("json") == nil {
		t.Errorf("cached description differs: %d modules, python %s, libraries %d", len(again.Modules), again.Python, len(again.Libraries))
	}

	other := runtimeinfo.WithLibraries(runtimeinfo.LibrarySpec{Name: "re"})
	if _, cached, err := runtimeinfo.GenerateCached(t.Context(), "/usr/bin/python3", dir, other); err != nil || cached {
		t.Errorf("other libraries: cached %v, err %v; want a new description", cached, err)
	}

	files, _ := filepath.Glob(filepath.Join(dir, "python-*.json.gz"))
	if len(files) != 2 {
		t.Fatalf("cache files %v, want 2", files)
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("not gzip"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if info, cached, err := runtimeinfo.GenerateCached(t.Context(), "/usr/bin/python3", dir, libs); err != nil || cached || info.Library("json") == nil {
		t.Errorf("damaged cache: cached %v, err %v", cached, err)
	}
}

// BenchmarkRuntimeDescription: describing the runtime (the baseline, what a
// sandbox on a fresh data directory did at every start) against reading the
// description back from the fingerprint cache.
func BenchmarkRuntimeDescription(b *testing.B) {
	dir := b.TempDir()
	b.Run("generate", func(b *testing.B) {
		for b.Loop() {
			if _, err := runtimeinfo.Generate(b.Context(), "/usr/bin/python3"); err != nil {
				b.Fatal(err)
			}
		}
	})
	if _, _, err := runtimeinfo.GenerateCached(b.Context(), "/usr/bin/python3", dir); err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if _, cached, err := runtimeinfo.GenerateCached(b.Context(), "/usr/bin/python3", dir); err != nil || !cached {
				b.Fatalf("cached %v, err %v", cached, err)
			}
		}
	})
}
