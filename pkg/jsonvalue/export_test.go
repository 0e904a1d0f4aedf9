package jsonvalue

// DecodeAny is Decode without its fast path, the reference FuzzDecode checks
// that path against.
var DecodeAny = decodeAny
