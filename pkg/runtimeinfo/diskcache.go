package runtimeinfo

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// fingerprintScript prints what identifies an interpreter's runtime: its
// version, executable and import path.
const fingerprintScript = `import json, sys; print(json.dumps([sys.version, sys.executable, sys.path]))`

// Fingerprint identifies the runtime of the interpreter at python as
// Generate with opts would describe it: the interpreter's version, executable
// and import path, and for each directory on that path its entries (a
// package installed, removed or upgraded changes them: dist-info names carry
// versions) and modification time. It takes a few milliseconds, where
// Generate takes seconds.
func Fingerprint(ctx context.Context, python string, opts ...Option) (string, error) {
	o := apply(opts)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-I", "-c", fingerprintScript).Output()
	if err != nil {
		return "", fmt.Errorf("fingerprint python runtime %s: %w", python, err)
	}
	var id []any
	if err := json.Unmarshal(out, &id); err != nil || len(id) != 3 {
		return "", fmt.Errorf("fingerprint python runtime %s: unexpected answer %q", python, out)
	}
	h := sha256.New()
	h.Write(out)
	spec, err := json.Marshal([]any{o.libraries, o.maxDoc, o.maxEntry, indexerScript})
	if err != nil {
		return "", err
	}
	h.Write(spec)
	paths, _ := id[2].([]any)
	for _, p := range paths {
		dir, _ := p.(string)
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		slices.Sort(names)
		fmt.Fprintf(h, "\x00%s\x00%d\x00%q", dir, st.ModTime().UnixNano(), names)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// GenerateCached is Generate with a cache in dir, keyed by the runtime's
// Fingerprint: a runtime described once is described again at once, also
// for a fresh NATS data directory. cached says the description came from
// the cache. A cache that cannot be read or written is not an error: the
// runtime is described as by Generate.
func GenerateCached(ctx context.Context, python, dir string, opts ...Option) (info *Info, cached bool, err error) {
	if dir == "" {
		info, err = Generate(ctx, python, opts...)
		return info, false, err
	}
	fp, err := Fingerprint(ctx, python, opts...)
	if err != nil {
		info, err = Generate(ctx, python, opts...)
		return info, false, err
	}
	path := filepath.Join(dir, "python-"+fp[:32]+".json.gz")
	if info, err := readCached(path); err == nil {
		return info, true, nil
	}
	info, err = Generate(ctx, python, opts...)
	if err != nil {
		return nil, false, err
	}
	_ = writeCached(path, info) // best effort: a read-only home is fine
	return info, false, nil
}

func readCached(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	info := &Info{}
	if err := json.NewDecoder(zr).Decode(info); err != nil {
		return nil, err
	}
	if len(info.Modules) == 0 {
		return nil, fmt.Errorf("%s: empty description", path)
	}
	return info, nil
}

// writeCached writes info atomically (a temporary file renamed), so that
// replicas sharing the directory never read half a file.
func writeCached(path string, info *Info) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(info); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".python-*.tmp")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// DefaultCacheDir is where runtime descriptions are cached by default:
// nova/runtime in the user's cache directory ("" when there is none).
func DefaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "nova", "runtime")
}
