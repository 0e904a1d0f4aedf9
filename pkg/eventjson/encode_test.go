package eventjson

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestMarshalMatchesReference fills every message of nova.v1 at random
// (edge values weighted: escapes, invalid UTF-8, unknown enum numbers,
// extreme and non-finite numbers, timestamps at and past protojson's
// range, JSON values with white space) and checks that marshal and the
// reference (protojson, the special fields appended) fail on the same
// messages and otherwise write the same JSON: the same members and, as
// text, the same numbers.
func TestMarshalMatchesReference(t *testing.T) {
	var messages []protoreflect.MessageDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("nova.v1", func(fd protoreflect.FileDescriptor) bool {
		var add func(protoreflect.MessageDescriptors)
		add = func(ms protoreflect.MessageDescriptors) {
			for i := range ms.Len() {
				if !ms.Get(i).IsMapEntry() {
					messages = append(messages, ms.Get(i))
				}
				add(ms.Get(i).Messages())
			}
		}
		add(fd.Messages())
		return true
	})
	if len(messages) < 20 {
		t.Fatalf("found %d nova.v1 messages; is the package registered?", len(messages))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var failed, compared, fast int
	for _, md := range messages {
		for range 300 {
			m := dynamicFor(md)
			fillMessage(rng, m, 0)
			got, errGot := Marshal(m.Interface())
			var ref bytes.Buffer
			errRef := referenceMarshal(&ref, m)
			if (errGot == nil) != (errRef == nil) {
				t.Fatalf("%s: error %v, the reference's %v\n%v", md.FullName(), errGot, errRef, m)
			}
			if errGot != nil {
				failed++
				continue
			}
			compared++
			if !sameJSON(t, got, ref.Bytes()) {
				t.Fatalf("%s:\n got %s\nwant %s", md.FullName(), got, ref.Bytes())
			}
			// Either writing reads (the fast way, or the general one where that
			// gives up) as the reference reading reads it.
			for _, text := range [][]byte{got, ref.Bytes()} {
				a, b := m.New(), m.New()
				errA, errB := unmarshal(text, a), referenceUnmarshal(text, b)
				if (errA == nil) != (errB == nil) {
					t.Fatalf("%s: reading %s: error %v, the reference's %v", md.FullName(), text, errA, errB)
				}
				if errA != nil {
					continue
				}
				ja, errJA := Marshal(a.Interface())
				jb, errJB := Marshal(b.Interface())
				if errJA != nil || errJB != nil || !bytes.Equal(ja, jb) {
					t.Fatalf("%s: reading %s:\n got %s\nwant %s", md.FullName(), text, ja, jb)
				}
			}
			if decodeFast(got, m.New()) {
				fast++
			}
			// And it reads back as the same message (but that a JSONValue
			// written as null is read as not set, and then not written).
			back := m.New()
			if err := unmarshal(got, back); err != nil {
				t.Fatalf("%s: reading %s: %v", md.FullName(), got, err)
			}
			again, err := Marshal(back.Interface())
			if err != nil || !reflect.DeepEqual(withoutNulls(decodeJSON(t, again)), withoutNulls(decodeJSON(t, got))) {
				t.Fatalf("%s: read back and written again:\n got %s (%v)\nwant %s", md.FullName(), again, err, got)
			}
		}
	}
	// Both kinds of case must have been met, or the filler is too tame or
	// too wild to test anything.
	if failed < 100 || compared < 1000 || fast < compared/3 {
		t.Fatalf("%d messages compared (%d read the fast way), %d refused by both", compared, fast, failed)
	}
	// A JSONValue of white space is null; but JSON's white space only
	// (the reference trimmed Unicode's too, and wrote null for U+2028).
	if _, err := Marshal(&novav1.JSONValue{Raw: []byte("\u2028")}); err == nil {
		t.Error("a JSONValue of U+2028 was written; it is not JSON")
	}
	t.Logf("%d message types, %d messages written alike (%d read back the fast way), %d refused by both", len(messages), compared, fast, failed)
}

// dynamicFor is a message of md's generated type (the JSONValue check
// needs it), else a dynamic one.
func dynamicFor(md protoreflect.MessageDescriptor) protoreflect.Message {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil {
		return mt.New()
	}
	return dynamicpb.NewMessage(md)
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(decodeJSON(t, a), decodeJSON(t, b))
}

// decodeJSON reads data with its numbers as they are written.
func decodeJSON(t *testing.T, data []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %s: %v", data, err)
	}
	return v
}

// withoutNulls drops the members whose value is null, at every depth.
func withoutNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
			} else {
				v[k] = withoutNulls(e)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = withoutNulls(e)
		}
	}
	return v
}

var (
	edgeStrings = []string{"", "plain", "a\"b\\c/d", "\x00\x01\b\f\n\r\t\x1f\x7f", "日本 ключ", "\u2028\u2029", "<&>", "\xff\xfe", "e\u0301"}
	edgeFloats  = []float64{0, math.Copysign(0, -1), 1, -1.5, 150, 1e-7, 1e-6, 9.99e-7, 1e20, 1e21, 1.7976931348623157e308, 5e-324, math.NaN(), math.Inf(1), math.Inf(-1), 0.1, 123456.789}
	edgeInts    = []int64{0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64, 9007199254740993}
	edgeJSON    = []string{"", "  ", "null", "1", "150.0", "9007199254740993", `"s"`, ` {"a" : [1, 2.50, {"b": null}] } `, `{"ключ":"日本","x":-0.0}`, "[]", "{}", "true", "{bad"}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// fill sets each field of m or not, at random, nested messages to depth 3.
func fill(rng *rand.Rand, m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(2) == 0 || (fd.Message() != nil && depth >= 3) {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(3) {
				if fd.Message() != nil {
					e := l.NewElement()
					fillMessage(rng, e.Message(), depth+1)
					l.Append(e)
				} else {
					l.Append(scalar(rng, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				k := protoreflect.ValueOfString(pick(rng, []string{"k", "a", "z", "<&>", "日本", ""})).MapKey()
				if fd.MapValue().Message() != nil {
					v := mp.NewValue()
					fillMessage(rng, v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(rng, fd.MapValue()))
				}
			}
		case fd.Message() != nil:
			fillMessage(rng, m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, scalar(rng, fd))
		}
	}
}

// fillMessage fills a message field's value: the well-known and JSONValue
// types with values of their own.
func fillMessage(rng *rand.Rand, m protoreflect.Message, depth int) {
	switch m.Descriptor().FullName() {
	case jsonValueName:
		m.Interface().(*novav1.JSONValue).Raw = []byte(pick(rng, edgeJSON))
	case timestampName:
		secs := pick(rng, []int64{0, 1, -1, 1_700_000_000, minTimestampSeconds, maxTimestampSeconds, minTimestampSeconds - 1, maxTimestampSeconds + 1})
		nanos := pick(rng, []int32{0, 1, 500_000_000, 120_000, 7_000_000, 999_999_999, 1_000_000_000, -1})
		proto.Merge(m.Interface(), &timestamppb.Timestamp{Seconds: secs, Nanos: nanos})
	case structName, valueName, listValueName:
		s, err := structpb.NewStruct(map[string]any{"n": pick(rng, edgeFloats), "s": pick(rng, edgeStrings[:7]), "b": true, "nil": nil,
			"list": []any{1.5, "x", map[string]any{"in": 1e21}}, "obj": map[string]any{}})
		if err != nil {
			panic(err)
		}
		switch m.Descriptor().FullName() {
		case structName:
			proto.Merge(m.Interface(), s)
		case valueName:
			proto.Merge(m.Interface(), structpb.NewStructValue(s))
		default:
			proto.Merge(m.Interface(), s.Fields["list"].GetListValue())
		}
	default:
		fill(rng, m, depth)
	}
}

func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rng.IntN(2) == 0)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(pick(rng, edgeInts)))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(pick(rng, edgeInts)))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(pick(rng, edgeInts))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(pick(rng, edgeInts)))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(pick(rng, edgeFloats)))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(pick(rng, edgeFloats))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(pick(rng, edgeStrings))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(pick(rng, edgeStrings)))
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		if rng.IntN(4) == 0 {
			return protoreflect.ValueOfEnum(99) // a number the enum does not name
		}
		return protoreflect.ValueOfEnum(values.Get(rng.IntN(values.Len())).Number())
	}
	panic("kind " + fd.Kind().String())
}

// BenchmarkMarshal writes the benchmark events with marshal and, as the
// baseline, with the reference writing.
func BenchmarkMarshal(b *testing.B) {
	benchEach(b, []benchImpl{
		{"eventjson", func(_ *testing.B, m proto.Message) func() error {
			return func() error { _, err := Marshal(m); return err }
		}},
		{"reference", func(_ *testing.B, m proto.Message) func() error {
			return func() error { var buf bytes.Buffer; return referenceMarshal(&buf, m.ProtoReflect()) }
		}},
	})
}

// benchImpl is a way of writing or reading events: prepare turns one event
// into one call of it.
type benchImpl struct {
	name    string
	prepare func(*testing.B, proto.Message) func() error
}

// benchEach runs every implementation on each benchmark event (an engine
// state with a context, a sandbox result with its output analysis, a
// node's completion with timestamps), as sub-benchmarks event/implementation.
func benchEach(b *testing.B, impls []benchImpl) {
	at := timestamppb.New(time.Date(2026, 11, 27, 1, 2, 3, 456_000_000, time.UTC))
	analysis, err := structpb.NewStruct(map[string]any{"isStructured": true, "itemCount": 2, "keys": []any{"ok", "x"}})
	if err != nil {
		b.Fatal(err)
	}
	events := map[string]proto.Message{
		"state": &novav1.ExecutionState{
			ExecutionId: "4f8e2a6c-2b1d-4c1e-9a57-0c1d2e3f4a5b",
			Context:     jsonvalue.Proto([]byte(`{"order":{"id":9007199254740993,"total":150.0,"items":[{"sku":"a-1","n":2},{"sku":"b-7","n":1}]},"x":1}`)),
			Nodes:       map[string]*novav1.NodeState{"n0": {Visits: 1}, "n1": {Visits: 1}},
		},
		"result": &novav1.CodeExecuted{
			StepId: "4f8e2a6c/n1/1/1", ContextUpdates: jsonvalue.Proto([]byte(`{"x":1}`)),
			Result: jsonvalue.Proto([]byte(`{"ok":true}`)), Stdout: "done\n", DurationMs: 3.25,
			OutputAnalysis: analysis,
		},
		"completed": &novav1.NodeCompleted{
			ExecutionId: "4f8e2a6c-2b1d-4c1e-9a57-0c1d2e3f4a5b", NodeId: "n1", NodeType: "action", Visit: 1, Status: "success",
			InputContext: jsonvalue.Proto([]byte(`{"x":1}`)), OutputResult: jsonvalue.Proto([]byte(`{"ok":true}`)),
			ExecutionTimeMs: 3.25, Sequence: 2, StartedAt: at, CompletedAt: at, CostUsd: 0.0125,
		},
	}
	for name, msg := range events {
		for _, impl := range impls {
			call := impl.prepare(b, msg)
			b.Run(name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
