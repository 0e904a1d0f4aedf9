package eventjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// referenceMarshal is the writing marshal must agree with: protojson writes
// the message without its special fields, which are appended to its
// object.
func referenceMarshal(buf *bytes.Buffer, m protoreflect.Message) error {
	p := planOf(m.Descriptor())
	if m.Descriptor().FullName() == jsonValueName {
		return referenceWriteValue(buf, m)
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
		if err := referenceWriteField(buf, fd, m.Get(fd)); err != nil {
			return fmt.Errorf("field %s: %w", fd.Name(), err)
		}
	}
	buf.WriteByte('}')
	return nil
}

func referenceWriteField(buf *bytes.Buffer, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch {
	case fd.IsList():
		l := v.List()
		buf.WriteByte('[')
		for i := range l.Len() {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := referenceMarshal(buf, l.Get(i).Message()); err != nil {
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
			err = referenceMarshal(buf, e.Message())
			return err == nil
		})
		if err != nil {
			return err
		}
		buf.WriteByte('}')
	default:
		return referenceMarshal(buf, v.Message())
	}
	return nil
}

// writeValue writes a JSONValue's text, checked, or null when it is empty.
func referenceWriteValue(buf *bytes.Buffer, m protoreflect.Message) error {
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

// referenceUnmarshal is the plain reading of the format that unmarshal
// must agree with: the object decoded into a map, its special members taken
// out, the rest encoded again for protojson.
func referenceUnmarshal(data []byte, m protoreflect.Message) error {
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
		return err
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
		switch fd := s.fd; {
		case fd.IsList():
			var items []json.RawMessage
			if err := json.Unmarshal(s.raw, &items); err != nil {
				return err
			}
			l := m.Mutable(fd).List()
			for _, item := range items {
				e := l.NewElement()
				if err := referenceUnmarshal(item, e.Message()); err != nil {
					return err
				}
				l.Append(e)
			}
		case fd.IsMap():
			var entries map[string]json.RawMessage
			if err := json.Unmarshal(s.raw, &entries); err != nil {
				return err
			}
			mp := m.Mutable(fd).Map()
			for k, item := range entries {
				e := mp.NewValue()
				if err := referenceUnmarshal(item, e.Message()); err != nil {
					return err
				}
				mp.Set(protoreflect.ValueOfString(k).MapKey(), e)
			}
		default:
			if err := referenceUnmarshal(s.raw, m.Mutable(fd).Message()); err != nil {
				return err
			}
		}
	}
	return nil
}

// ambiguous tells whether data names a special field of a message twice
// (by its JSON and its proto name, or by an escaped name): the reference
// then reads them in a map's random order.
func ambiguous(data []byte, md protoreflect.MessageDescriptor) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil {
		return false
	}
	p := planOf(md)
	seen := map[protoreflect.FieldDescriptor]bool{}
	for name, raw := range members {
		if fd := p.byName[name]; fd != nil {
			if seen[fd] {
				return true
			}
			seen[fd] = true
			target := fd.Message()
			if fd.IsMap() {
				target = fd.MapValue().Message()
			}
			var items []json.RawMessage
			if fd.IsList() {
				_ = json.Unmarshal(raw, &items)
			} else if fd.IsMap() {
				var entries map[string]json.RawMessage
				_ = json.Unmarshal(raw, &entries)
				for _, e := range entries {
					items = append(items, e)
				}
			} else {
				items = []json.RawMessage{raw}
			}
			for _, item := range items {
				if ambiguous(item, target) {
					return true
				}
			}
		}
	}
	return false
}

var referenceSeeds = []string{
	`{"executionId":"e1","context":{"id":9007199254740993,"f":150.0}}`,
	`{"execution_id":"e1","context":null,"workflowName":"w","workflowName":"v"}`,
	`{"context":{"a":1},"context":{"b":[1,"]}",{"c":"\""}]}}`,
	`{"con\u0074ext":{"a":1}, "unknown": {"x": [1, {"y": "}"}]}}`,
	`{"ai":{"phase":"execute","execution":{"stepId":"s","contextUpdates":{"n":1},"result":[1,2.0]}},"nodes":{"x":{"visits":2},"x":{"visits":3}}}`,
	`{"nodes":{"x":{"visits":"bad"},"x":{}}}`,
	`{"nodes":[]}`,
	`{"ai":{"execution":[1]}}`,
	`[]`, `null`, `"s"`, `3`, `{}`, ` { } `, `{"context": }`,
	// More members than overridden compares pairwise.
	`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"context":{"v":1},` +
		`"executionId":"e1","b0":0,"b1":1,"b2":2,"b3":3,"executionId":"e2","context":{"v":2}}`,
}

// FuzzUnmarshalMatchesReference: whatever the text, unmarshal reads the
// same message as the reference, or fails where it fails.
func FuzzUnmarshalMatchesReference(f *testing.F) {
	for _, s := range referenceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			t.Skip("the reference replaces invalid UTF-8 in names; unmarshal leaves it to protojson")
		}
		for _, newMsg := range []func() proto.Message{
			func() proto.Message { return &novav1.ExecutionState{} },
			func() proto.Message { return &novav1.StartWorkflow{} },
		} {
			got, want := newMsg(), newMsg()
			if ambiguous(data, got.ProtoReflect().Descriptor()) {
				continue
			}
			errGot := unmarshal(data, got.ProtoReflect())
			errWant := referenceUnmarshal(data, want.ProtoReflect())
			if (errGot == nil) != (errWant == nil) {
				t.Fatalf("%T from %q: error %v, the reference's %v", got, data, errGot, errWant)
			}
			if errGot == nil && !proto.Equal(got, want) {
				t.Fatalf("%T from %q:\n got %v\nwant %v", got, data, got, want)
			}
		}
	})
}

// BenchmarkUnmarshal reads the benchmark events with unmarshal and, as the
// baselines, with unmarshal without its fast reading (general) and with the
// reference reading.
func BenchmarkUnmarshal(b *testing.B) {
	reading := func(read func([]byte, protoreflect.Message) error) func(*testing.B, proto.Message) func() error {
		return func(b *testing.B, msg proto.Message) func() error {
			data, err := Marshal(msg)
			if err != nil {
				b.Fatal(err)
			}
			return func() error { return read(data, msg.ProtoReflect().New()) }
		}
	}
	benchEach(b, []benchImpl{
		{"eventjson", reading(unmarshal)},
		{"general", reading(func(data []byte, m protoreflect.Message) error { return unmarshalGeneral(data, m, json.Valid(data)) })},
		{"reference", reading(referenceUnmarshal)},
	})
}
