package eventjson

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The fast reading: valid JSON in the forms the encoder writes (a member
// once, by its JSON or proto name; 64-bit integers as strings of digits,
// other numbers plain; enums by name; timestamps with 0, 3, 6 or 9
// fractional digits and Z; no float, no well-known type but Timestamp,
// Struct, Value and ListValue; object keys without escapes) is read
// straight into the message. Anything else (an unknown member, a null
// where a value is wanted, another spelling protojson accepts or refuses)
// makes it give up, and the message is read the general way: protojson,
// with the JSONValue fields cut out as their text. So what it reads, it
// reads as that would, only without protojson's generic walk (some 3% of
// nova dev's CPU under load).

// decodeFast reads the valid JSON data into m, which it resets first, and
// reports whether it could.
func decodeFast(data []byte, m protoreflect.Message) bool {
	proto.Reset(m.Interface())
	d := decoder{data: data}
	d.space()
	if !d.message(m) {
		return false
	}
	d.space()
	return d.i == len(d.data)
}

type decoder struct {
	data []byte
	i    int
}

func (d *decoder) space() { d.i = skipSpace(d.data, d.i) }

func (d *decoder) peek() byte {
	if d.i < len(d.data) {
		return d.data[d.i]
	}
	return 0
}

// message reads an object into m.
func (d *decoder) message(m protoreflect.Message) bool {
	if d.peek() != '{' {
		return false
	}
	p := fieldsPlanOf(m.Descriptor())
	var seen []protoreflect.FieldNumber
	d.i++
	for first := true; d.more(&first, '}'); {
		name, ok := d.key()
		if !ok {
			return false
		}
		fd := p.byName[name]
		if fd == nil || slices.Contains(seen, fd.Number()) {
			return false // unknown, or a member twice
		}
		seen = append(seen, fd.Number())
		if oneof := fd.ContainingOneof(); oneof != nil && !oneof.IsSynthetic() && m.WhichOneof(oneof) != nil {
			return false
		}
		if !d.field(m, fd) {
			return false
		}
	}
	return true
}

// more moves on to the next member or item of the object or array being
// read (past the comma before it, none before the first) and reports
// whether there is one; at the end it moves past end. Reading starts with
// d.i past the opening bracket.
func (d *decoder) more(first *bool, end byte) bool {
	d.space()
	if d.peek() == end {
		d.i++
		return false
	}
	if !*first {
		d.i++ // ',' (the JSON is valid)
		d.space()
	}
	*first = false
	return true
}

// key reads a member's key, without escapes, and the colon after it.
func (d *decoder) key() (string, bool) {
	k, ok := d.plainString()
	if !ok {
		return "", false
	}
	d.space()
	d.i++ // ':'
	d.space()
	return k, true
}

func (d *decoder) field(m protoreflect.Message, fd protoreflect.FieldDescriptor) bool {
	if d.peek() == 'n' { // null
		if fd.Message() != nil && fd.Message().FullName() == jsonValueName && !fd.IsList() && !fd.IsMap() {
			d.i += len("null") // a JSONValue written as null: not set
			return true
		}
		return false
	}
	switch {
	case fd.IsList():
		if d.peek() != '[' {
			return false
		}
		l := m.Mutable(fd).List()
		d.i++
		for first := true; d.more(&first, ']'); {
			v, ok := d.value(fd, l.NewElement)
			if !ok {
				return false
			}
			l.Append(v)
		}
		return true
	case fd.IsMap():
		if d.peek() != '{' || fd.MapKey().Kind() != protoreflect.StringKind {
			return false
		}
		mp := m.Mutable(fd).Map()
		d.i++
		for first := true; d.more(&first, '}'); {
			key, ok := d.key()
			if !ok {
				return false
			}
			k := protoreflect.ValueOfString(key).MapKey()
			if mp.Has(k) {
				return false // a key twice
			}
			v, ok := d.value(fd.MapValue(), mp.NewValue)
			if !ok {
				return false
			}
			mp.Set(k, v)
		}
		return true
	}
	v, ok := d.value(fd, func() protoreflect.Value { return m.NewField(fd) })
	if !ok {
		return false
	}
	m.Set(fd, v)
	return true
}

// value reads one value of fd's kind (a list's element or a map's value
// included); newMessage makes the message a message kind is read into.
func (d *decoder) value(fd protoreflect.FieldDescriptor, newMessage func() protoreflect.Value) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		switch d.peek() {
		case 't':
			d.i += len("true")
			return protoreflect.ValueOfBool(true), true
		case 'f':
			d.i += len("false")
			return protoreflect.ValueOfBool(false), true
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, err := strconv.ParseInt(string(d.integer(false)), 10, 32); err == nil {
			return protoreflect.ValueOfInt32(int32(n)), true
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, err := strconv.ParseUint(string(d.integer(false)), 10, 32); err == nil {
			return protoreflect.ValueOfUint32(uint32(n)), true
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if n, err := strconv.ParseInt(string(d.integer(true)), 10, 64); err == nil {
			return protoreflect.ValueOfInt64(n), true
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, err := strconv.ParseUint(string(d.integer(true)), 10, 64); err == nil {
			return protoreflect.ValueOfUint64(n), true
		}
	case protoreflect.DoubleKind:
		if n, ok := d.number(); ok {
			return protoreflect.ValueOfFloat64(n), true
		}
	case protoreflect.StringKind:
		if s, ok := d.string(); ok {
			return protoreflect.ValueOfString(s), true
		}
	case protoreflect.BytesKind:
		if s, ok := d.plainString(); ok {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				return protoreflect.ValueOfBytes(b), true
			}
		}
	case protoreflect.EnumKind:
		if s, ok := d.plainString(); ok {
			if ev := fd.Enum().Values().ByName(protoreflect.Name(s)); ev != nil {
				return protoreflect.ValueOfEnum(ev.Number()), true
			}
		}
	case protoreflect.MessageKind:
		v := newMessage()
		switch fd.Message().FullName() {
		case jsonValueName:
			end := skipValue(d.data, d.i)
			v.Message().Interface().(*novav1.JSONValue).Raw = append([]byte(nil), jsonvalue.Compact(d.data[d.i:end])...)
			d.i = end
			return v, true
		case timestampName:
			if s, ok := d.plainString(); ok && d.timestamp(s, v.Message()) {
				return v, true
			}
			return protoreflect.Value{}, false
		case structName, valueName, listValueName:
			if d.wellKnown(v.Message().Interface()) {
				return v, true
			}
			return protoreflect.Value{}, false
		}
		if fd.Message().ParentFile().Package() != "google.protobuf" && d.message(v.Message()) {
			return v, true
		}
	}
	return protoreflect.Value{}, false // and a float, a Duration, an Any, ...
}

// wellKnown reads a Struct, Value or ListValue (of the generated types).
func (d *decoder) wellKnown(m proto.Message) bool {
	switch m := m.(type) {
	case *structpb.Struct:
		if d.peek() != '{' {
			return false
		}
		fields, ok := d.object()
		m.Fields = fields
		return ok
	case *structpb.Value:
		v, ok := d.any()
		if ok {
			m.Kind = v.Kind
		}
		return ok
	case *structpb.ListValue:
		if d.peek() != '[' {
			return false
		}
		values, ok := d.array()
		m.Values = values
		return ok
	}
	return false
}

// any reads a JSON value as a google.protobuf.Value.
func (d *decoder) any() (*structpb.Value, bool) {
	switch c := d.peek(); c {
	case 'n':
		d.i += len("null")
		return structpb.NewNullValue(), true
	case 't':
		d.i += len("true")
		return structpb.NewBoolValue(true), true
	case 'f':
		d.i += len("false")
		return structpb.NewBoolValue(false), true
	case '"':
		s, ok := d.string()
		return structpb.NewStringValue(s), ok
	case '{':
		fields, ok := d.object()
		return structpb.NewStructValue(&structpb.Struct{Fields: fields}), ok
	case '[':
		values, ok := d.array()
		return structpb.NewListValue(&structpb.ListValue{Values: values}), ok
	}
	n, ok := d.number()
	return structpb.NewNumberValue(n), ok
}

// number reads a plain JSON number within a double's range ("NaN",
// "Infinity" and a number in a string give up).
func (d *decoder) number() (float64, bool) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	end := skipValue(d.data, d.i)
	n, err := strconv.ParseFloat(string(d.data[d.i:end]), 64)
	if err != nil {
		return 0, false
	}
	d.i = end
	return n, true
}

// object reads a JSON object as a Struct's fields: keys without escapes,
// each once.
func (d *decoder) object() (map[string]*structpb.Value, bool) {
	fields := map[string]*structpb.Value{}
	d.i++
	for first := true; d.more(&first, '}'); {
		key, ok := d.key()
		if _, dup := fields[key]; !ok || dup {
			return nil, false
		}
		if fields[key], ok = d.any(); !ok {
			return nil, false
		}
	}
	return fields, true
}

// array reads a JSON array as a ListValue's values.
func (d *decoder) array() ([]*structpb.Value, bool) {
	var values []*structpb.Value
	d.i++
	for first := true; d.more(&first, ']'); {
		v, ok := d.any()
		if !ok {
			return nil, false
		}
		values = append(values, v)
	}
	return values, true
}

// integer returns the text of an integer written as the encoder writes it
// (quoted: a string of digits), nil for any other spelling: a fraction, an
// exponent, leading zeros or a plus sign.
func (d *decoder) integer(quoted bool) []byte {
	i := d.i
	if quoted {
		if d.peek() != '"' {
			return nil
		}
		i++
	}
	start := i
	if i < len(d.data) && d.data[i] == '-' {
		i++
	}
	digits := i
	for i < len(d.data) && d.data[i] >= '0' && d.data[i] <= '9' {
		i++
	}
	if i == digits || (d.data[digits] == '0' && i > digits+1) {
		return nil
	}
	text := d.data[start:i]
	if quoted {
		if i >= len(d.data) || d.data[i] != '"' {
			return nil
		}
		i++
	} else if i < len(d.data) && (d.data[i] == '.' || d.data[i] == 'e' || d.data[i] == 'E') {
		return nil
	}
	d.i = i
	return text
}

// quoted returns the text between the quotes of the string at d.i, if it
// is valid UTF-8, and the index past its closing quote.
func (d *decoder) quoted() (raw []byte, end int, ok bool) {
	if d.peek() != '"' {
		return nil, 0, false
	}
	end = skipString(d.data, d.i)
	raw = d.data[d.i+1 : end-1]
	return raw, end, utf8.Valid(raw)
}

// plainString reads a string without escapes, valid UTF-8.
func (d *decoder) plainString() (string, bool) {
	raw, end, ok := d.quoted()
	if !ok || bytes.IndexByte(raw, '\\') >= 0 {
		return "", false
	}
	d.i = end
	return string(raw), true
}

// string reads a string, its escapes decoded; a surrogate escaped gives up.
func (d *decoder) string() (string, bool) {
	raw, end, ok := d.quoted()
	if !ok {
		return "", false
	}
	var out []byte
	start := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		out = append(out, raw[start:i]...)
		i++
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 32)
			if err != nil || utf8.RuneLen(rune(r)) < 0 || (r >= 0xd800 && r <= 0xdfff) {
				return "", false
			}
			out = utf8.AppendRune(out, rune(r))
			i += 4
		default:
			return "", false
		}
		start = i + 1
	}
	d.i = end
	if out == nil {
		return string(raw), true
	}
	return string(append(out, raw[start:]...)), true
}

// timestamp reads the form the encoder writes: UTC, Z, 0, 3, 6 or 9
// fractional digits, within protojson's range.
func (d *decoder) timestamp(s string, m protoreflect.Message) bool {
	switch len(s) {
	case len("2006-01-02T15:04:05Z"), len("2006-01-02T15:04:05.000Z"), len("2006-01-02T15:04:05.000000Z"), len("2006-01-02T15:04:05.000000000Z"):
	default:
		return false
	}
	if s[len(s)-1] != 'Z' || s[10] != 'T' {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return false
	}
	secs := t.Unix()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds {
		return false
	}
	fields := m.Descriptor().Fields()
	m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(secs))
	m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(t.Nanosecond())))
	return true
}
