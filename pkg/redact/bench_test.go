package redact

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchContext is a workflow context of the usual kind: names, ids, prose,
// numbers, a list of records, one secret under a secret key and one under
// an innocuous key; with imageBytes > 0 it also carries a base64 image.
func benchContext(imageBytes int) map[string]any {
	items := make([]any, 10)
	for i := range items {
		items[i] = map[string]any{
			"sku":      fmt.Sprintf("SKU-%05d", i),
			"name":     "Blue widget, large",
			"quantity": json.Number("3"),
			"price":    json.Number("19.99"),
		}
	}
	ctx := map[string]any{
		"customer":    "Acme Corp",
		"email":       "billing@acme.example.com",
		"customer_id": "3f2b8c1e-9d4a-4b7e-8f10-2c5d6e7f8a9b",
		"created_at":  "2026-03-12T10:40:37Z",
		"total":       json.Number("599.70"),
		"vip":         true,
		"notes":       strings.Repeat("Deliver to the loading dock before noon; ask for the task desk. ", 5),
		"items":       items,
		"smtp":        map[string]any{"host": "mail.example.com", "port": json.Number("587"), "password": "hunter2-horse"},
		"stripe":      fake("sk_live_", alnum, 24),
		"status":      "pending",
	}
	if imageBytes > 0 {
		ctx["scan_b64"] = base64.StdEncoding.EncodeToString([]byte(fake("\x89PNG\r\n\x1a\n", alnum+"\x00\xff", imageBytes)))
	}
	return ctx
}

// BenchmarkRedactMap measures Map, which hides secrets by key and by look,
// against the key-only walk it replaced, in the same run: the
// keys-and-values rows report their time as a multiple of the key-only row
// before them (x-key-only).
func BenchmarkRedactMap(b *testing.B) {
	keepString := func(s string) string { return s }
	for _, shape := range []struct {
		name  string
		image int
	}{{"typical", 0}, {"with-192KiB-image", 192 << 10}} {
		ctx := benchContext(shape.image)
		var baseline float64 // ns/op of the key-only walk
		b.Run(shape.name+"/key-only", func(b *testing.B) {
			for b.Loop() {
				redactMap(ctx, keepString)
			}
			baseline = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
		b.Run(shape.name+"/keys-and-values", func(b *testing.B) {
			for b.Loop() {
				Map(ctx)
			}
			if baseline > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/baseline, "x-key-only")
			}
		})
	}
}
