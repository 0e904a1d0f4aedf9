package contextsummary

import (
	"fmt"
	"strings"
)

// Text renders the summary for a prompt: one line per key in key order,
// nested values indented below their parent, for example
//
//   - email_password: string: present, value hidden [REDACTED] (...)
//   - pdf_data_b64: string, base64 data, 48213 chars (looks like a PDF); not shown
//   - total: number = 1500
func (s Summary) Text() string {
	if len(s.Fields) == 0 {
		return "(the context is empty)\n"
	}
	var b strings.Builder
	for _, f := range s.Fields {
		writeField(&b, f, 0)
	}
	return b.String()
}

func writeField(b *strings.Builder, f Field, indent int) {
	b.WriteString(strings.Repeat("  ", indent))
	b.WriteString("- ")
	b.WriteString(f.Name)
	b.WriteString(": ")
	b.WriteString(f.line())
	b.WriteByte('\n')
	for _, c := range f.Fields {
		writeField(b, c, indent+1)
	}
}

func (f Field) line() string {
	if f.Secret {
		return string(f.Type) + ": present, value hidden [REDACTED] (a secret; read it from context, never print it)"
	}
	switch f.Type {
	case TypeReference:
		return "large value, " + f.Note + " (the code reads the full value from context; it is not shown here)"
	case TypeOther:
		return "unsupported value: " + f.Note
	case TypeNull:
		return "null"
	case TypeNumber, TypeBoolean:
		return string(f.Type) + " = " + f.Sample
	case TypeString:
		if f.Encoded {
			return fmt.Sprintf("string, %s; not shown", f.Note)
		}
		if f.Truncated {
			return fmt.Sprintf("string, %s, starts %s…", plural(f.Size, "char"), f.Sample)
		}
		return fmt.Sprintf("string, %s = %s", plural(f.Size, "char"), f.Sample)
	case TypeObject:
		s := fmt.Sprintf("object, %s, %s", plural(int64(f.Length), "key"), plural(f.Size, "byte"))
		if len(f.Keys) > 0 {
			s += " (keys: " + strings.Join(f.Keys, ", ")
			if f.Length > len(f.Keys) {
				s += fmt.Sprintf(", … %d more", f.Length-len(f.Keys))
			}
			s += ")"
		}
		if f.Length > len(f.Fields) && len(f.Fields) > 0 {
			s += fmt.Sprintf("; first %d shown", len(f.Fields))
		}
		return s
	case TypeArray:
		s := fmt.Sprintf("array, %s, %s", plural(int64(f.Length), "item"), plural(f.Size, "byte"))
		if len(f.ItemTypes) > 0 {
			types := make([]string, len(f.ItemTypes))
			for i, t := range f.ItemTypes {
				types[i] = string(t)
			}
			s += " (items: " + strings.Join(types, ", ") + ")"
		}
		if len(f.Fields) > 0 {
			s += "; first item:"
		}
		return s
	}
	return string(f.Type)
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
