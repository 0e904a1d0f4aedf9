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
	var buf bytes.Buffer
	if err := marshal(&buf, m.ProtoReflect()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Unmarshal decodes JSON into m, ignoring unknown fields.
func Unmarshal(data []byte, m proto.Message) error {
	return unmarshal(data, m.ProtoReflect())
}

var (
	marshalOptions   = protojson.MarshalOptions{}
	unmarshalOptions = protojson.UnmarshalOptions{DiscardUnknown: true}
)

func marshal(buf *bytes.Buffer, m protoreflect.Message) error {
	p := planOf(m.Descriptor())
	if m.Descriptor().FullName() == jsonValueName {
		return writeValue(buf, m)
	}
	if len(p.fields) == 0 {
		b, err := marshalOptions.Marshal(m.Interface())
		if err != nil {
			return err
		}
		buf.Write(b)
		return nil
	}
	// protojson writes every other field (on a shallow copy without the
	// special ones); the special fields are appended to its object.
	rest := m.New()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if !p.special(fd) {
			rest.Set(fd, v)
		}
		return true
	})
	base, err := marshalOptions.Marshal(rest.Interface())
	if err != nil {
		return err
	}
	base = bytes.TrimSpace(base)
	empty := len(bytes.TrimSpace(base[1:len(base)-1])) == 0
	buf.Write(base[:len(base)-1])
	for _, fd := range p.fields {
		if !m.Has(fd) {
			continue
		}
		if !empty {
			buf.WriteByte(',')
		}
		empty = false
		name, _ := json.Marshal(fd.JSONName())
		buf.Write(name)
		buf.WriteByte(':')
		if err := writeField(buf, fd, m.Get(fd)); err != nil {
			return fmt.Errorf("field %s: %w", fd.Name(), err)
		}
	}
	buf.WriteByte('}')
	return nil
}

func writeField(buf *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsList():
		l := v.List()
		buf.WriteByte('[')
		for i := range l.Len() {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := marshal(buf, l.Get(i).Message()); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case fd.IsMap():
		buf.WriteByte('{')
		first := true
		var err error
		v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			if !first {
				buf.WriteByte(',')
			}
			first = false
			name, _ := json.Marshal(k.String())
			buf.Write(name)
			buf.WriteByte(':')
			err = marshal(buf, e.Message())
			return err == nil
		})
		if err != nil {
			return err
		}
		buf.WriteByte('}')
	default:
		return marshal(buf, v.Message())
	}
	return nil
}

// writeValue writes a JSONValue's text, checked, or null when it is empty.
func writeValue(buf *bytes.Buffer, m protoreflect.Message) error {
	raw := m.Interface().(*novav1.JSONValue).GetRaw()
	if len(bytes.TrimSpace(raw)) == 0 {
		buf.WriteString("null")
		return nil
	}
	if !json.Valid(raw) {
		return fmt.Errorf("JSONValue holds invalid JSON (%d bytes)", len(raw))
	}
	buf.Write(jsonvalue.Compact(raw))
	return nil
}

func unmarshal(data []byte, m protoreflect.Message) error {
	if m.Descriptor().FullName() == jsonValueName {
		data = bytes.TrimSpace(data)
		if !json.Valid(data) {
			return fmt.Errorf("invalid JSON value")
		}
		m.Interface().(*novav1.JSONValue).Raw = append([]byte(nil), jsonvalue.Compact(data)...)
		return nil
	}
	p := planOf(m.Descriptor())
	if len(p.fields) == 0 {
		return unmarshalOptions.Unmarshal(data, m.Interface())
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return fmt.Errorf("%s: %w", m.Descriptor().FullName(), err)
	}
	type special struct {
		fd  protoreflect.FieldDescriptor
		raw json.RawMessage
	}
	var specials []special
	for name, raw := range members {
		if fd := p.byName[name]; fd != nil {
			delete(members, name)
			if string(bytes.TrimSpace(raw)) != "null" {
				specials = append(specials, special{fd, raw})
			}
		}
	}
	if len(members) > 0 {
		rest, err := json.Marshal(members)
		if err != nil {
			return err
		}
		if err := unmarshalOptions.Unmarshal(rest, m.Interface()); err != nil {
			return err
		}
	}
	for _, s := range specials {
		if err := readField(s.raw, s.fd, m); err != nil {
			return fmt.Errorf("%s.%s: %w", m.Descriptor().FullName(), s.fd.JSONName(), err)
		}
	}
	return nil
}

func readField(raw json.RawMessage, fd protoreflect.FieldDescriptor, m protoreflect.Message) error {
	switch {
	case fd.IsList():
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return err
		}
		l := m.Mutable(fd).List()
		for _, item := range items {
			e := l.NewElement()
			if err := unmarshal(item, e.Message()); err != nil {
				return err
			}
			l.Append(e)
		}
	case fd.IsMap():
		if fd.MapKey().Kind() != protoreflect.StringKind {
			return fmt.Errorf("map keys of kind %s are not supported", fd.MapKey().Kind())
		}
		var entries map[string]json.RawMessage
		if err := json.Unmarshal(raw, &entries); err != nil {
			return err
		}
		mp := m.Mutable(fd).Map()
		for k, item := range entries {
			e := mp.NewValue()
			if err := unmarshal(item, e.Message()); err != nil {
				return err
			}
			mp.Set(protoreflect.ValueOfString(k).MapKey(), e)
		}
	default:
		return unmarshal(raw, m.Mutable(fd).Message())
	}
	return nil
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
