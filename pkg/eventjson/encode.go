package eventjson

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The encoder writes what protojson writes, semantically (protojson's
// output is compact JSON with, by design, a random space here and there;
// this one has none), straight from protoreflect with each message's field
// names quoted once: protojson, which walks a message through its own
// generic machinery, took some 6% of nova dev's CPU under load, and a
// message with a JSONValue field was first copied without it. The
// well-known types NOVA's messages use (Timestamp, Struct, Value,
// ListValue) are written here too; any other one, and any value protojson
// would refuse, goes to protojson, which writes it or says why not.

// fieldsPlan is how the encoder writes a message and the fast reading
// finds its members: its fields in declaration order (protojson's), each
// with its key `"jsonName":` ready, and by the names protojson reads (JSON
// and proto).
type fieldsPlan struct {
	fields []encodeField
	byName map[string]protoreflect.FieldDescriptor
}

type encodeField struct {
	fd  protoreflect.FieldDescriptor
	key []byte
}

var fieldsPlans sync.Map // protoreflect.FullName -> *fieldsPlan

func fieldsPlanOf(md protoreflect.MessageDescriptor) *fieldsPlan {
	if p, ok := fieldsPlans.Load(md.FullName()); ok {
		return p.(*fieldsPlan)
	}
	fields := md.Fields()
	p := &fieldsPlan{fields: make([]encodeField, fields.Len()), byName: make(map[string]protoreflect.FieldDescriptor, 2*fields.Len())}
	for i := range fields.Len() {
		fd := fields.Get(i)
		key, _ := json.Marshal(fd.JSONName())
		p.fields[i] = encodeField{fd: fd, key: append(key, ':')}
		p.byName[fd.JSONName()] = fd
		p.byName[string(fd.Name())] = fd
	}
	fieldsPlans.Store(md.FullName(), p)
	return p
}

const (
	timestampName = "google.protobuf.Timestamp"
	structName    = "google.protobuf.Struct"
	valueName     = "google.protobuf.Value"
	listValueName = "google.protobuf.ListValue"
	// The range of a Timestamp protojson writes: 0001-01-01 to 9999-12-31.
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// appendMessage appends m as JSON.
func appendMessage(out []byte, m protoreflect.Message) ([]byte, error) {
	md := m.Descriptor()
	switch name := md.FullName(); {
	case name == jsonValueName:
		return appendJSONValue(out, m)
	case name == timestampName:
		return appendTimestamp(out, m)
	case name == structName:
		return appendStruct(out, m)
	case name == valueName:
		return appendStructValue(out, m)
	case name == listValueName:
		return appendListValue(out, m)
	case md.ParentFile().Package() == "google.protobuf":
		return appendProtojson(out, m)
	}
	out = append(out, '{')
	first := true
	for _, f := range fieldsPlanOf(md).fields {
		if !m.Has(f.fd) {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, f.key...)
		var err error
		if out, err = appendField(out, f.fd, m.Get(f.fd)); err != nil {
			return out, fmt.Errorf("field %s: %w", f.fd.Name(), err)
		}
	}
	return append(out, '}'), nil
}

// appendProtojson appends what protojson writes for m.
func appendProtojson(out []byte, m protoreflect.Message) ([]byte, error) {
	b, err := marshalOptions.Marshal(m.Interface())
	if err != nil {
		return out, err
	}
	return append(out, jsonvalue.Compact(b)...), nil
}

func appendField(out []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	var err error
	switch {
	case fd.IsList():
		l := v.List()
		out = append(out, '[')
		for i := range l.Len() {
			if i > 0 {
				out = append(out, ',')
			}
			if out, err = appendSingular(out, fd, l.Get(i)); err != nil {
				return out, err
			}
		}
		return append(out, ']'), nil
	case fd.IsMap():
		return appendMap(out, fd, v.Map())
	}
	return appendSingular(out, fd, v)
}

// appendMap appends a map as an object, its keys in protojson's order
// (sorted: false before true, numbers by value, strings by their bytes).
func appendMap(out []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) ([]byte, error) {
	type entry struct {
		k protoreflect.MapKey
		v protoreflect.Value
	}
	entries := make([]entry, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		entries = append(entries, entry{k, v})
		return true
	})
	var compare func(a, b protoreflect.MapKey) int
	switch fd.MapKey().Kind() {
	case protoreflect.BoolKind:
		compare = func(a, b protoreflect.MapKey) int {
			if a.Bool() == b.Bool() {
				return 0
			} else if !a.Bool() {
				return -1
			}
			return 1
		}
	case protoreflect.StringKind:
		compare = func(a, b protoreflect.MapKey) int { return cmp.Compare(a.String(), b.String()) }
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		compare = func(a, b protoreflect.MapKey) int { return cmp.Compare(a.Uint(), b.Uint()) }
	default:
		compare = func(a, b protoreflect.MapKey) int { return cmp.Compare(a.Int(), b.Int()) }
	}
	slices.SortFunc(entries, func(a, b entry) int { return compare(a.k, b.k) })
	out = append(out, '{')
	var err error
	for i, e := range entries {
		if i > 0 {
			out = append(out, ',')
		}
		if out, err = appendString(out, e.k.String()); err != nil {
			return out, err
		}
		out = append(out, ':')
		if out, err = appendSingular(out, fd.MapValue(), e.v); err != nil {
			return out, err
		}
	}
	return append(out, '}'), nil
}

// appendSingular appends one value of fd's kind (an element of a list or a
// map's value included).
func appendSingular(out []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(out, v.Bool()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(out, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(out, v.Uint(), 10), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		out = append(out, '"')
		return append(strconv.AppendInt(out, v.Int(), 10), '"'), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		out = append(out, '"')
		return append(strconv.AppendUint(out, v.Uint(), 10), '"'), nil
	case protoreflect.FloatKind:
		return appendFloat(out, v.Float(), 32), nil
	case protoreflect.DoubleKind:
		return appendFloat(out, v.Float(), 64), nil
	case protoreflect.StringKind:
		return appendString(out, v.String())
	case protoreflect.BytesKind:
		out = append(out, '"')
		return append(base64.StdEncoding.AppendEncode(out, v.Bytes()), '"'), nil
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return append(out, "null"...), nil
		}
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			out = append(out, '"')
			return append(append(out, ev.Name()...), '"'), nil
		}
		return strconv.AppendInt(out, int64(v.Enum()), 10), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(out, v.Message())
	}
	return out, fmt.Errorf("field kind %v is not supported", fd.Kind())
}

// appendJSONValue appends a JSONValue's text, checked, or null when it is
// empty.
func appendJSONValue(out []byte, m protoreflect.Message) ([]byte, error) {
	raw := m.Interface().(*novav1.JSONValue).GetRaw()
	if skipSpace(raw, 0) == len(raw) {
		return append(out, "null"...), nil
	}
	if !json.Valid(raw) {
		return out, fmt.Errorf("JSONValue holds invalid JSON (%d bytes)", len(raw))
	}
	return append(out, jsonvalue.Compact(raw)...), nil
}

// appendTimestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional
// digits, as protojson does; one out of its range goes to protojson, which
// refuses it.
func appendTimestamp(out []byte, m protoreflect.Message) ([]byte, error) {
	fields := m.Descriptor().Fields()
	secs, nanos := m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= 1e9 {
		return appendProtojson(out, m)
	}
	t := time.Unix(secs, nanos).UTC()
	out = append(out, '"')
	out = t.AppendFormat(out, "2006-01-02T15:04:05")
	switch {
	case nanos == 0:
	case nanos%1e6 == 0:
		out = append(out, '.')
		out = appendDigits(out, uint64(nanos/1e6), 3)
	case nanos%1e3 == 0:
		out = append(out, '.')
		out = appendDigits(out, uint64(nanos/1e3), 6)
	default:
		out = append(out, '.')
		out = appendDigits(out, uint64(nanos), 9)
	}
	return append(out, 'Z', '"'), nil
}

// appendDigits appends n with leading zeros to width digits.
func appendDigits(out []byte, n uint64, width int) []byte {
	var b [20]byte
	d := strconv.AppendUint(b[:0], n, 10)
	for range width - len(d) {
		out = append(out, '0')
	}
	return append(out, d...)
}

func appendStruct(out []byte, m protoreflect.Message) ([]byte, error) {
	fields := m.Descriptor().Fields().ByNumber(1) // map<string, Value> fields
	if !m.Has(fields) {
		return append(out, '{', '}'), nil
	}
	return appendMap(out, fields, m.Get(fields).Map())
}

func appendListValue(out []byte, m protoreflect.Message) ([]byte, error) {
	values := m.Descriptor().Fields().ByNumber(1) // repeated Value values
	if !m.Has(values) {
		return append(out, '[', ']'), nil
	}
	return appendField(out, values, m.Get(values))
}

// appendStructValue writes a google.protobuf.Value as the JSON value it
// holds; one with no kind set, or a number that is NaN or infinite, goes
// to protojson, which refuses it.
func appendStructValue(out []byte, m protoreflect.Message) ([]byte, error) {
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	if fd == nil {
		return appendProtojson(out, m)
	}
	v := m.Get(fd)
	if fd.Kind() == protoreflect.DoubleKind && (math.IsNaN(v.Float()) || math.IsInf(v.Float(), 0)) {
		return appendProtojson(out, m)
	}
	return appendSingular(out, fd, v)
}

// appendFloat writes a number as protojson does: encoding/json's format,
// NaN and the infinities as strings.
func appendFloat(out []byte, n float64, bitSize int) []byte {
	switch {
	case math.IsNaN(n):
		return append(out, `"NaN"`...)
	case math.IsInf(n, +1):
		return append(out, `"Infinity"`...)
	case math.IsInf(n, -1):
		return append(out, `"-Infinity"`...)
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 {
		if bitSize == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bitSize == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	out = strconv.AppendFloat(out, n, format, -1, bitSize)
	if format == 'e' {
		// 1e-07 as 1e-7.
		if l := len(out); l >= 4 && out[l-4] == 'e' && out[l-3] == '-' && out[l-2] == '0' {
			out[l-2] = out[l-1]
			out = out[:l-1]
		}
	}
	return out
}

// appendString writes s as a JSON string, escaping what protojson escapes
// (quote, backslash, control characters and DEL); invalid UTF-8 is an
// error, as there.
func appendString(out []byte, s string) ([]byte, error) {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return out, fmt.Errorf("string contains invalid UTF-8 at byte %d", i)
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' && c != 0x7f {
			i++
			continue
		}
		out = append(out, s[start:i]...)
		out = append(out, '\\')
		switch c {
		case '"', '\\':
			out = append(out, c)
		case '\b':
			out = append(out, 'b')
		case '\f':
			out = append(out, 'f')
		case '\n':
			out = append(out, 'n')
		case '\r':
			out = append(out, 'r')
		case '\t':
			out = append(out, 't')
		default:
			out = append(out, 'u')
			out = append(out, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			out = strconv.AppendUint(out, uint64(c), 16)
		}
		i++
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"'), nil
}
