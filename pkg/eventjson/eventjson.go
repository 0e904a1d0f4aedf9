// Package eventjson is the JSON form of NOVA's protobuf messages: protojson,
// except that a nova.v1.JSONValue field is written as the JSON value it
// holds, and read back as its exact text. A producer writes
//
//	{"workflowName": "orders", "context": {"id": 9007199254740993, "f": 150.0}}
//
// and the engine receives exactly those digits: protojson's Struct would have
// read every number as a float64.
//
// Messages without JSONValue fields are plain protojson. Unknown fields are
// ignored when reading, so producers can be upgraded before consumers.
package eventjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

var jsonValueName = (&novav1.JSONValue{}).ProtoReflect().Descriptor().FullName()

// Marshal encodes m as JSON.
func Marshal(m proto.Message) ([]byte, error) {
	out, err := appendMessage(make([]byte, 0, 256), m.ProtoReflect())
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Unmarshal decodes JSON into m, ignoring unknown fields.
func Unmarshal(data []byte, m proto.Message) error {
	return unmarshal(data, m.ProtoReflect())
}

var (
	marshalOptions   = protojson.MarshalOptions{}
	unmarshalOptions = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// unmarshal is Unmarshal of a message, or of the JSONValue it leads to.
func unmarshal(data []byte, m protoreflect.Message) error {
	valid := json.Valid(data)
	if valid && m.Descriptor().FullName() != jsonValueName {
		if decodeFast(data, m) {
			return nil
		}
		proto.Reset(m.Interface()) // what it read before it gave up
	}
	return unmarshalGeneral(data, m, valid)
}

// unmarshalGeneral is unmarshal without the fast reading; valid tells
// whether data is valid JSON.
func unmarshalGeneral(data []byte, m protoreflect.Message, valid bool) error {
	if m.Descriptor().FullName() != jsonValueName && len(planOf(m.Descriptor()).fields) == 0 {
		return unmarshalOptions.Unmarshal(data, m.Interface()) // it checks the text itself
	}
	if !valid {
		if m.Descriptor().FullName() == jsonValueName {
			return fmt.Errorf("invalid JSON value")
		}
		// protojson (or encoding/json) says where and why.
		var probe any
		err := json.Unmarshal(data, &probe)
		return fmt.Errorf("%s: %w", m.Descriptor().FullName(), err)
	}
	return unmarshalValid(data, m)
}

// unmarshalValid is unmarshal of data that is valid JSON. The members of a
// message with JSONValue fields are cut out of data as they are, not decoded
// and encoded again: protojson reads the others, in one piece when no member
// is special or repeated, and each special member is read as its text.
func unmarshalValid(data []byte, m protoreflect.Message) error {
	if m.Descriptor().FullName() == jsonValueName {
		m.Interface().(*novav1.JSONValue).Raw = append([]byte(nil), jsonvalue.Compact(bytes.TrimSpace(data))...)
		return nil
	}
	p := planOf(m.Descriptor())
	if len(p.fields) == 0 {
		return unmarshalOptions.Unmarshal(data, m.Interface())
	}
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil
	}
	if data[0] != '{' {
		return fmt.Errorf("%s: a JSON object is needed, not %s", m.Descriptor().FullName(), jsonvalue.KindOf(data))
	}
	members := objectMembers(data)
	over := overridden(members)
	var specials []member
	rest, whole := make([]byte, 0, len(data)), true
	rest = append(rest, '{')
	for i, mb := range members {
		if over != nil && over[i] {
			whole = false
			continue
		}
		if fd := p.byName[mb.name]; fd != nil {
			whole = false
			if string(mb.value) != "null" {
				specials = append(specials, mb)
			}
			continue
		}
		if len(rest) > 1 {
			rest = append(rest, ',')
		}
		rest = append(append(append(rest, mb.key...), ':'), mb.value...)
	}
	if whole {
		rest = data
	} else {
		rest = append(rest, '}')
	}
	if len(rest) > 2 {
		if err := unmarshalOptions.Unmarshal(rest, m.Interface()); err != nil {
			return err
		}
	}
	for _, s := range specials {
		fd := p.byName[s.name]
		if err := readField(s.value, fd, m); err != nil {
			return fmt.Errorf("%s.%s: %w", m.Descriptor().FullName(), fd.JSONName(), err)
		}
	}
	return nil
}

func readField(raw []byte, fd protoreflect.FieldDescriptor, m protoreflect.Message) error {
	switch {
	case fd.IsList():
		if raw[0] != '[' {
			return fmt.Errorf("a JSON array is needed, not %s", jsonvalue.KindOf(raw))
		}
		l := m.Mutable(fd).List()
		for _, item := range arrayItems(raw) {
			e := l.NewElement()
			if err := unmarshalValid(item, e.Message()); err != nil {
				return err
			}
			l.Append(e)
		}
	case fd.IsMap():
		if fd.MapKey().Kind() != protoreflect.StringKind {
			return fmt.Errorf("map keys of kind %s are not supported", fd.MapKey().Kind())
		}
		if raw[0] != '{' {
			return fmt.Errorf("a JSON object is needed, not %s", jsonvalue.KindOf(raw))
		}
		mp := m.Mutable(fd).Map()
		entries := objectMembers(raw)
		over := overridden(entries)
		for i, entry := range entries {
			if over != nil && over[i] {
				continue
			}
			e := mp.NewValue()
			if err := unmarshalValid(entry.value, e.Message()); err != nil {
				return err
			}
			mp.Set(protoreflect.ValueOfString(entry.name).MapKey(), e)
		}
	default:
		return unmarshalValid(raw, m.Mutable(fd).Message())
	}
	return nil
}

// member is a member of a JSON object: its name, decoded, and the text of
// its key and of its value (no white space around either).
type member struct {
	name       string
	key, value []byte
}

// objectMembers lists the members of the valid JSON object data, which
// starts with '{', in their order.
func objectMembers(data []byte) []member {
	var out []member
	i := skipSpace(data, 1)
	for data[i] != '}' {
		end := skipString(data, i)
		key := data[i:end]
		name := string(key[1 : len(key)-1])
		if bytes.IndexByte(key, '\\') >= 0 {
			_ = json.Unmarshal(key, &name) // valid: checked with the whole
		}
		i = skipSpace(data, skipSpace(data, end)+1) // past ':'
		end = skipValue(data, i)
		out = append(out, member{name: name, key: key, value: data[i:end]})
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out
}

// overridden tells which members a later member of the same name overrides,
// as in a JSON object read into a map (the last wins); nil when no name
// repeats.
func overridden(members []member) []bool {
	var over []bool
	mark := func(i int) {
		if over == nil {
			over = make([]bool, len(members))
		}
		over[i] = true
	}
	if len(members) <= 16 {
		for i := range members {
			for j := i + 1; j < len(members); j++ {
				if members[j].name == members[i].name {
					mark(i)
					break
				}
			}
		}
		return over
	}
	last := make(map[string]int, len(members))
	for i, mb := range members {
		if j, ok := last[mb.name]; ok {
			mark(j)
		}
		last[mb.name] = i
	}
	return over
}

// arrayItems lists the items of the valid JSON array data, which starts
// with '['.
func arrayItems(data []byte) [][]byte {
	var out [][]byte
	i := skipSpace(data, 1)
	for data[i] != ']' {
		end := skipValue(data, i)
		out = append(out, data[i:end])
		i = skipSpace(data, end)
		if data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the string that starts at data[i].
func skipString(data []byte, i int) int {
	for i++; data[i] != '"'; i++ {
		if data[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// skipValue returns the end of the valid JSON value that starts at data[i].
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch data[i] {
			case '"':
				i = skipString(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(data) && !strings.ContainsRune(",}] \t\n\r", rune(data[i])) {
		i++
	}
	return i
}

// plan lists a message's fields that are, or lead to, a JSONValue.
type plan struct {
	fields []protoreflect.FieldDescriptor
	byName map[string]protoreflect.FieldDescriptor
}

func (p *plan) special(fd protoreflect.FieldDescriptor) bool {
	for _, f := range p.fields {
		if f == fd {
			return true
		}
	}
	return false
}

var plans sync.Map // protoreflect.FullName -> *plan

func planOf(md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(md.FullName()); ok {
		return p.(*plan)
	}
	p := &plan{byName: map[string]protoreflect.FieldDescriptor{}}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		target := fd.Message()
		if fd.IsMap() {
			target = fd.MapValue().Message()
		}
		if target == nil || !leadsToJSONValue(target, map[protoreflect.FullName]bool{md.FullName(): true}) {
			continue
		}
		p.fields = append(p.fields, fd)
		p.byName[fd.JSONName()] = fd
		p.byName[string(fd.Name())] = fd
	}
	plans.Store(md.FullName(), p)
	return p
}

func leadsToJSONValue(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if md.FullName() == jsonValueName {
		return true
	}
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		target := fd.Message()
		if fd.IsMap() {
			target = fd.MapValue().Message()
		}
		if target != nil && leadsToJSONValue(target, seen) {
			return true
		}
	}
	return false
}
