package eventjson

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestFastReadingGivesUp: the fast reading takes the forms the encoder
// writes and gives every other spelling to the general reading (protojson
// underneath), which accepts some of them and refuses others; either way
// unmarshal reads what the reference reads.
func TestFastReadingGivesUp(t *testing.T) {
	for _, c := range []struct {
		name string
		msg  func() proto.Message
		data string
		fast bool
	}{
		{"canonical dead letter", dl, `{"consumer":"c","deliveries":"3","headers":{"a":"1","b":"2"},"data":"aGk=","failedAt":"2026-11-27T01:02:03.456Z"}`, true},
		{"proto field names", dl, `{"consumer":"c","stream_sequence":"9"}`, true},
		{"white space and escapes", dl, " {\n \"reason\" : \"a\\\"b\\\\c\\/d\\n\\u00e9\\u0000\" } ", true},
		{"canonical node", node, `{"id":"n","type":"NODE_TYPE_ACTION","timeoutSeconds":1.5e-7,"maxVisits":-3,"allowHosts":["x","y"],"cache":false}`, true},
		{"JSON in a Struct", result, `{"outputAnalysis":{"a":[1,"x\n",null,true,{"b":-0.0,"c":1e21}],"d":{}}}`, true},
		{"a Struct's key twice", result, `{"outputAnalysis":{"a":1,"a":2}}`, false},
		{"a Struct's number out of range", result, `{"outputAnalysis":{"a":1e400}}`, false},
		{"a Struct's key escaped", result, `{"outputAnalysis":{"\u0061":1}}`, false},
		{"null for a Struct", result, `{"outputAnalysis":null}`, false},
		{"a member twice", dl, `{"consumer":"a","consumer":"b"}`, false},
		{"a member by both names", dl, `{"streamSequence":"1","stream_sequence":"2"}`, false},
		{"a map key twice", dl, `{"headers":{"a":"1","a":"2"}}`, false},
		{"an unknown member", dl, `{"consumer":"c","later":1}`, false},
		{"null for a string", dl, `{"consumer":null}`, false},
		{"a 64-bit integer as a number", dl, `{"deliveries":3}`, false},
		{"a 64-bit integer with leading zeros", dl, `{"deliveries":"007"}`, false},
		{"a 64-bit integer with a plus", dl, `{"deliveries":"+7"}`, false},
		{"a 64-bit integer with an exponent", dl, `{"deliveries":"1e2"}`, false},
		{"a negative unsigned", dl, `{"deliveries":"-1"}`, false},
		{"a 32-bit integer as a string", node, `{"maxVisits":"3"}`, false},
		{"a 32-bit integer with a fraction", node, `{"maxVisits":3.0}`, false},
		{"a 32-bit integer out of range", node, `{"maxVisits":2147483648}`, false},
		{"an enum by number", node, `{"type":2}`, false},
		{"an enum name unknown", node, `{"type":"NODE_TYPE_LATER"}`, false},
		{"a double as a string", node, `{"timeoutSeconds":"1.5"}`, false},
		{"NaN", node, `{"timeoutSeconds":"NaN"}`, false},
		{"a double out of range", node, `{"timeoutSeconds":1e400}`, false},
		{"base64 without padding", dl, `{"data":"aGk"}`, false},
		{"URL-safe base64", dl, `{"data":"-_8="}`, false},
		{"a timestamp with an offset", dl, `{"failedAt":"2026-11-27T01:02:03+01:00"}`, false},
		{"a timestamp with 2 fractional digits", dl, `{"failedAt":"2026-11-27T01:02:03.45Z"}`, false},
		{"a timestamp out of range", dl, `{"failedAt":"0000-12-31T23:59:59Z"}`, false},
		{"an escaped surrogate pair", dl, `{"reason":"\ud83d\ude00"}`, false},
		{"an escaped key", dl, `{"consum\u0065r":"c"}`, false},
		{"not an object", dl, `null`, false},
	} {
		got := c.msg()
		if fast := decodeFast([]byte(c.data), got.ProtoReflect()); fast != c.fast {
			t.Errorf("%s: read the fast way %v, want %v", c.name, fast, c.fast)
		}
		got, want := c.msg(), c.msg()
		errGot, errWant := unmarshal([]byte(c.data), got.ProtoReflect()), referenceUnmarshal([]byte(c.data), want.ProtoReflect())
		if (errGot == nil) != (errWant == nil) {
			t.Errorf("%s: error %v, the reference's %v", c.name, errGot, errWant)
			continue
		}
		a, _ := Marshal(got)
		b, _ := Marshal(want)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: read %s, the reference %s", c.name, a, b)
		}
	}
}

func dl() proto.Message   { return &novav1.DeadLetter{} }
func node() proto.Message { return &novav1.Node{} }

func result() proto.Message { return &novav1.CodeExecuted{} }
