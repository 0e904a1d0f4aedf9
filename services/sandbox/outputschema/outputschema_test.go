package outputschema

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// decode reads JSON as the sandbox does (json.Number for numbers).
func decode(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("bad JSON %s: %v", s, err)
	}
	return v
}

// canonical renders JSON with sorted keys, for comparison.
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(g)
	return string(b)
}

func TestAnalyze(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		// The seed's own branches.
		{"a string is a primitive", `"hello"`, `{"type": "primitive", "isStructured": false, "itemCount": 0}`},
		{"a number is a primitive", `42`, `{"type": "primitive", "isStructured": false, "itemCount": 0}`},
		{"null is a primitive", `null`, `{"type": "primitive", "isStructured": false, "itemCount": 0}`},
		{"an object", `{"a": 1}`, `{"type": "object", "isStructured": false, "itemCount": 0}`},
		{"an empty array", `[]`, `{"type": "array", "isStructured": false, "itemCount": 0}`},
		{"an array of scalars", `[1, 2, 3]`, `{"type": "array", "isStructured": false, "itemCount": 3}`},
		{"an array mixing objects and scalars", `[{"a": 1}, 2]`, `{"type": "array", "isStructured": false, "itemCount": 2}`},
		{"an array with a nested array", `[{"a": 1}, [1]]`, `{"type": "array", "isStructured": false, "itemCount": 2}`},
		{
			name: "scraped products (the seed's scraper example)",
			input: `[
				{"title": "Lamp", "price": 19.99, "url": "https://shop.example/lamp", "added": "2024-01-15", "inStock": true,  "note": ""},
				{"title": "Desk", "price": 120,   "url": "https://shop.example/desk", "added": "2024-02-01", "inStock": false, "note": "  "},
				{"title": "Chair", "price": null, "url": "https://shop.example/chair", "added": "2024-03-10T09:30:00Z", "inStock": true},
				{"title": "Rug",  "price": 45,    "url": "",                          "added": "", "inStock": true, "note": "sale"}
			]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 4, "fields": [
				{"name": "added",   "type": "date",    "required": true,  "coverage": 75,  "examples": ["2024-01-15", "2024-02-01", "2024-03-10T09:30:00Z"]},
				{"name": "inStock", "type": "boolean", "required": true,  "coverage": 100, "examples": [true, false, true]},
				{"name": "note",    "type": "string",  "required": false, "coverage": 25,  "examples": ["sale"]},
				{"name": "price",   "type": "number",  "required": true,  "coverage": 75,  "examples": [19.99, 120, 45]},
				{"name": "title",   "type": "string",  "required": true,  "coverage": 100, "examples": ["Lamp", "Desk", "Chair"]},
				{"name": "url",     "type": "url",     "required": true,  "coverage": 75,  "examples": ["https://shop.example/lamp", "https://shop.example/desk", "https://shop.example/chair"]}
			]}`,
		},
		{
			name: "required means more than 70%: exactly 70% is not",
			input: `[{"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1},
			         {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1}, {"a": 1}, {"a": 1, "b": null}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 10, "fields": [
				{"name": "a", "type": "number", "required": true,  "coverage": 100, "examples": [1, 1, 1]},
				{"name": "b", "type": "number", "required": false, "coverage": 70,  "examples": [1, 1, 1]}
			]}`,
		},
		{
			name:  "coverage is rounded",
			input: `[{"a": "x"}, {"a": "y"}, {}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 3, "fields": [
				{"name": "a", "type": "string", "required": false, "coverage": 67, "examples": ["x", "y"]}
			]}`,
		},
		{
			name:  "a field never populated is a string with no examples",
			input: `[{"a": null}, {"a": ""}, {"a": []}, {"a": {}}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 4, "fields": [
				{"name": "a", "type": "string", "required": false, "coverage": 0, "examples": []}
			]}`,
		},
		{
			name:  "0 and false are values",
			input: `[{"n": 0, "ok": false}, {"n": 0, "ok": false}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 2, "fields": [
				{"name": "n",  "type": "number",  "required": true, "coverage": 100, "examples": [0, 0]},
				{"name": "ok", "type": "boolean", "required": true, "coverage": 100, "examples": [false, false]}
			]}`,
		},
		{
			name:  "the most common type wins",
			input: `[{"link": "https://a.example/1"}, {"link": "n/a"}, {"link": "http://a.example/3"}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 3, "fields": [
				{"name": "link", "type": "url", "required": true, "coverage": 100, "examples": ["https://a.example/1", "n/a", "http://a.example/3"]}
			]}`,
		},
		{
			name:  "nested values",
			input: `[{"tags": ["a", "b"], "meta": {"k": 1}}]`,
			want: `{"type": "array", "isStructured": true, "itemCount": 1, "fields": [
				{"name": "meta", "type": "object", "required": true, "coverage": 100, "examples": [{"k": 1}]},
				{"name": "tags", "type": "array",  "required": true, "coverage": 100, "examples": [["a", "b"]]}
			]}`,
		},
		{
			name:  "objects with no keys are still structured",
			input: `[{}, {}]`,
			want:  `{"type": "array", "isStructured": true, "itemCount": 2, "fields": []}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Analyze(decode(t, tt.input))
			if g, w := canonical(t, got), canonical(t, decode(t, tt.want)); g != w {
				t.Errorf("Analyze:\n got %s\nwant %s", g, w)
			}
		})
	}
}

func TestFieldTypes(t *testing.T) {
	tests := []struct {
		value any
		want  string
	}{
		{"https://example.com/a?b=1", FieldURL},
		{"HTTP://EXAMPLE.COM", FieldURL},
		{"ftp://files.example/x", FieldURL},
		{"https://", FieldString},
		{"example.com", FieldString},
		{"see https://example.com", FieldString},
		{"/products/1", FieldString},
		{"2024-01-15", FieldDate},
		{"2024-01-15T10:00:00Z", FieldDate},
		{"2024-01-15T10:00:00.123+02:00", FieldDate},
		{"2024-01-15 10:00:00", FieldDate},
		{"15/01/2024", FieldDate},
		{"01/15/2024", FieldDate},
		{"15.01.2024", FieldDate},
		{"Jan 15, 2024", FieldDate},
		{"January 15, 2024", FieldDate},
		{"15 January 2024", FieldDate},
		{"Mon, 15 Jan 2024 10:00:00 GMT", FieldDate},
		{"Mon Jan 15 2024 10:00:00 GMT+0000 (Coordinated Universal Time)", FieldDate},
		{"2024", FieldString},
		{"12345678", FieldString},
		{"19.99", FieldString},
		{"Product 2", FieldString},
		{json.Number("3"), FieldNumber},
		{2.5, FieldNumber},
		{true, FieldBoolean},
	}
	for _, tt := range tests {
		if got := fieldType(tt.value); got != tt.want {
			t.Errorf("fieldType(%#v) = %s, want %s", tt.value, got, tt.want)
		}
	}
}

func TestExamplesAreCapped(t *testing.T) {
	long := strings.Repeat("é", 500)
	big := map[string]any{"text": strings.Repeat("x", 500)}
	a := Analyze([]any{
		map[string]any{"s": long, "o": big},
		map[string]any{"s": "b", "o": map[string]any{"k": 1}},
		map[string]any{"s": "c"},
		map[string]any{"s": "d"},
	})
	s, o := a.Fields[1], a.Fields[0]
	if len(s.Examples) != 3 || s.Examples[1] != "b" || s.Examples[2] != "c" {
		t.Fatalf("examples %v, want the first three", s.Examples)
	}
	if first := s.Examples[0].(string); first != strings.Repeat("é", 200)+"…" {
		t.Errorf("long string example not cut at 200 characters: %d runes", len([]rune(first)))
	}
	if text, ok := o.Examples[0].(string); !ok || !strings.HasPrefix(text, `{"text":"xxx`) || len([]rune(text)) != 201 {
		t.Errorf("large nested example %v, want its cut JSON text", o.Examples[0])
	}
	if _, ok := o.Examples[1].(map[string]any); !ok {
		t.Errorf("small nested example %v, want it as is", o.Examples[1])
	}
}

func TestForUpdates(t *testing.T) {
	rows := []any{map[string]any{"a": json.Number("1")}, map[string]any{"a": json.Number("2")}}
	tests := []struct {
		name    string
		updates map[string]any
		want    string
	}{
		{"one key: its value", map[string]any{"rows": rows}, `{"type": "array", "isStructured": true, "itemCount": 2, "fields": [{"name": "a", "type": "number", "required": true, "coverage": 100, "examples": [1, 2]}]}`},
		{"one scalar key", map[string]any{"total": 3}, `{"type": "primitive", "isStructured": false, "itemCount": 0}`},
		{"several keys: the object", map[string]any{"rows": rows, "total": 2}, `{"type": "object", "isStructured": false, "itemCount": 0}`},
		{"no updates", nil, `{"type": "object", "isStructured": false, "itemCount": 0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g, w := canonical(t, ForUpdates(tt.updates)), canonical(t, decode(t, tt.want)); g != w {
				t.Errorf("ForUpdates:\n got %s\nwant %s", g, w)
			}
		})
	}
}

func TestGoValues(t *testing.T) {
	type item struct {
		Name  string  `json:"name"`
		Price float64 `json:"price"`
	}
	tests := []struct {
		name  string
		value any
		want  string
	}{
		{"a slice of structs", []item{{"a", 1}, {"b", 0}}, `{"type": "array", "isStructured": true, "itemCount": 2, "fields": [
			{"name": "name", "type": "string", "required": true, "coverage": 100, "examples": ["a", "b"]},
			{"name": "price", "type": "number", "required": true, "coverage": 100, "examples": [1, 0]}]}`},
		{"a slice of maps", []map[string]any{{"k": "v"}}, `{"type": "array", "isStructured": true, "itemCount": 1, "fields": [
			{"name": "k", "type": "string", "required": true, "coverage": 100, "examples": ["v"]}]}`},
		{"an int", 7, `{"type": "primitive", "isStructured": false, "itemCount": 0}`},
		{"a protobuf list", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("x")}}),
			`{"type": "array", "isStructured": false, "itemCount": 1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g, w := canonical(t, ForValue(tt.value)), canonical(t, decode(t, tt.want)); g != w {
				t.Errorf("ForValue:\n got %s\nwant %s", g, w)
			}
		})
	}
}

func TestEncodings(t *testing.T) {
	a := Analyze(decode(t, `[{"url": "https://a.example", "n": 12345678901234567890}]`))
	want := `{"type":"array","isStructured":true,"itemCount":1,"fields":[` +
		`{"name":"n","type":"number","required":true,"coverage":100,"examples":[12345678901234567890]},` +
		`{"name":"url","type":"url","required":true,"coverage":100,"examples":["https://a.example"]}]}`
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if canonical(t, json.RawMessage(b)) != canonical(t, json.RawMessage(want)) {
		t.Errorf("JSON %s, want %s", b, want)
	}

	s, err := a.ToStruct()
	if err != nil {
		t.Fatalf("ToStruct: %v", err)
	}
	pj, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// A Struct holds numbers as doubles.
	wantStruct := strings.Replace(want, "12345678901234567890", "12345678901234567000", 1)
	if canonical(t, json.RawMessage(pj)) != canonical(t, json.RawMessage(wantStruct)) {
		t.Errorf("Struct %s, want %s", pj, wantStruct)
	}

	var back Analysis
	if err := json.Unmarshal(b, &back); err != nil || back.ItemCount != 1 || len(back.Fields) != 2 || back.Fields[1].Type != FieldURL {
		t.Errorf("JSON does not decode back: %+v, %v", back, err)
	}

	m := Analyze("x").AsMap()
	if _, ok := m["fields"]; ok {
		t.Errorf("AsMap of a primitive has fields: %v", m)
	}
}
