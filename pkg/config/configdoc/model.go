// Package configdoc builds the configuration reference of a NOVA checkout
// from its source: every service's config struct (the struct whose address
// its main package hands to service.Main or config.Load), the settings
// structs it embeds, and the environment variables their tags name, as
// package config reads them. It parses the source with go/parser, so it
// needs no build and sees exactly what is committed.
package configdoc

// Model is what Scan finds in a repository.
type Model struct {
	// Services are the binaries under services/, sorted by name.
	Services []*Service
	// Groups are the settings structs that services load or reach through
	// their config structs (embedded, or a struct field without an env
	// tag, which package config walks alike), sorted by import path and
	// type name. The structs of package main are not among them.
	Groups []*Struct
}

// Service is one binary under services/.
type Service struct {
	// Name is the directory's name (services/<name>).
	Name string
	// Dir is the directory relative to the repository root, slash-separated.
	Dir string
	// Own are the config structs declared in the main package that it
	// loads, in source order: usually one, named config; none when the
	// main package loads only structs declared elsewhere.
	Own []*Struct
	// Loads are the structs declared outside package main whose address
	// the main package passes to a loader, in source order.
	Loads []*Struct
	// Direct are the variables the binary reads with os.Getenv or
	// os.LookupEnv instead of a tagged struct, sorted by name.
	Direct []*DirectRead
}

// Struct is a config struct: the variables its own fields name, and the
// structs it includes.
type Struct struct {
	// Key identifies the struct: import path, ".", type name.
	Key string
	// ImportPath and Dir (relative to the root) are its package's.
	ImportPath string
	Dir        string
	// Package is the package's name, Name the type's.
	Package string
	Name    string
	// Ref is how the reference names a group: package.Type, or dir.Type
	// when groups from two packages of the same name are listed. Empty for
	// a main package's own struct, which its service's section holds.
	Ref string
	// Doc is the type's doc comment on one line.
	Doc string
	// Vars are the env-tagged fields, in field order.
	Vars []*Var
	// Includes are the structs its fields embed or nest, in field order.
	Includes []*Include
}

// Include is a struct that a config struct's field brings in.
type Include struct {
	Struct *Struct
	// Field is the field's name when it is a named field rather than an
	// embedded one; package config reads both without a prefix.
	Field string
}

// Var is one environment variable, as one field's tags declare it.
type Var struct {
	// Name is the env tag.
	Name string
	// Field and Type are the Go field's name and type as written.
	Field string
	Type  string
	// Default is the default tag; "" means none (package config treats an
	// empty value and an unset one alike).
	Default  string
	Secret   bool
	Required bool
	// Doc is the field's doc comment, or else its line comment, on one line.
	Doc string
	// DeclaredIn is the key of the struct that declares the field.
	DeclaredIn string
}

// DirectRead is a variable that a binary reads by name in its code.
type DirectRead struct {
	Name string
	// Files read it; relative to the root, slash-separated, sorted. Not
	// the functions: renaming one must not make the reference stale.
	Files []string
}
