package redact

// Test helpers for the external tests.
var (
	Fake   = fake
	JWT    = jwt
	PEMKey = pemKey
)

// Alphabets for Fake.
const (
	Alnum    = alnum
	Letters  = letters
	HexLower = hexLower
	Base32   = base32
)
