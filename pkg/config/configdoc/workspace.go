package configdoc

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// module is one module of the workspace.
type module struct {
	path string // module path
	dir  string // relative to the root, slash-separated, cleaned
}

// readWorkspace lists the modules of root's go.work, longest module path
// first, so that import paths map to the innermost module's directory.
func readWorkspace(root string) ([]module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, fmt.Errorf("read the workspace (import paths map to directories through its modules): %w", err)
	}
	var dirs []string
	inUse := false
	for line := range strings.Lines(string(data)) {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.ReplaceAll(strings.ReplaceAll(line, "(", " ( "), ")", " ) ")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case inUse && f[0] == ")":
			inUse = false
		case inUse:
			dirs = append(dirs, f[0])
		case f[0] == "use" && len(f) >= 2 && f[1] == "(":
			inUse = true
		case f[0] == "use" && len(f) == 2:
			dirs = append(dirs, f[1])
		}
	}
	var mods []module
	for _, d := range dirs {
		if u, err := strconv.Unquote(d); err == nil {
			d = u
		}
		d = path.Clean(filepath.ToSlash(d))
		p, err := modulePath(filepath.Join(root, filepath.FromSlash(d), "go.mod"))
		if err != nil {
			return nil, err
		}
		mods = append(mods, module{path: p, dir: d})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s: no use directive, so no module to read", filepath.Join(root, "go.work"))
	}
	sort.Slice(mods, func(i, j int) bool { return len(mods[i].path) > len(mods[j].path) })
	return mods, nil
}

func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("read a workspace module: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" {
			if u, err := strconv.Unquote(f[1]); err == nil {
				return u, nil
			}
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s: no module directive", gomod)
}

type loader struct {
	root    string
	fset    *token.FileSet
	modules []module
	pkgs    map[string]*pkg // by import path; nil for a directory without Go files
	structs map[string]*Struct
}

type pkg struct {
	path, dir, name string
	files           []*file // sorted by name
	types           map[string]typeDecl
	consts          map[string]string // string constants
}

type file struct {
	rel     string // relative to the root, slash-separated
	ast     *ast.File
	imports []imp
}

type imp struct{ name, path string } // name: the alias, "" when none

type typeDecl struct {
	spec *ast.TypeSpec
	doc  *ast.CommentGroup
	file *file
}

// dirOf maps an import path to its directory relative to the root; false
// for a package outside the workspace.
func (l *loader) dirOf(importPath string) (string, bool) {
	for _, m := range l.modules {
		if importPath == m.path {
			return m.dir, true
		}
		if rest, ok := strings.CutPrefix(importPath, m.path+"/"); ok {
			return path.Join(m.dir, rest), true
		}
	}
	return "", false
}

// importPathOf is dirOf's inverse.
func (l *loader) importPathOf(dir string) (string, bool) {
	best := -1
	for i, m := range l.modules {
		if (m.dir == "." || dir == m.dir || strings.HasPrefix(dir, m.dir+"/")) && (best < 0 || len(m.dir) > len(l.modules[best].dir)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := l.modules[best]
	if dir == m.dir {
		return m.path, true
	}
	return m.path + "/" + strings.TrimPrefix(dir, m.dir+"/"), true
}

// load parses the package of importPath: nil for one outside the workspace
// or a directory without Go files.
func (l *loader) load(importPath string) (*pkg, error) {
	if p, ok := l.pkgs[importPath]; ok {
		return p, nil
	}
	dir, ok := l.dirOf(importPath)
	if !ok {
		return nil, nil
	}
	p, err := l.parseDir(importPath, dir)
	if err != nil {
		return nil, err
	}
	l.pkgs[importPath] = p
	return p, nil
}

func (l *loader) parseDir(importPath, dir string) (*pkg, error) {
	entries, err := os.ReadDir(filepath.Join(l.root, filepath.FromSlash(dir)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read package %s: %w", importPath, err)
	}
	p := &pkg{path: importPath, dir: dir, types: map[string]typeDecl{}, consts: map[string]string{}}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		rel := path.Join(dir, name)
		af, err := parser.ParseFile(l.fset, filepath.Join(l.root, filepath.FromSlash(rel)), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", rel, err)
		}
		if !builds(af) {
			continue
		}
		if p.name == "" {
			p.name = af.Name.Name
		} else if af.Name.Name != p.name {
			return nil, fmt.Errorf("%s: package %s, but %s holds package %s", rel, af.Name.Name, dir, p.name)
		}
		f := &file{rel: rel, ast: af}
		for _, is := range af.Imports {
			ip, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: import %s: %w", rel, is.Path.Value, err)
			}
			var alias string
			if is.Name != nil {
				alias = is.Name.Name
			}
			f.imports = append(f.imports, imp{name: alias, path: ip})
		}
		p.files = append(p.files, f)
		p.index(f)
	}
	if len(p.files) == 0 {
		return nil, nil
	}
	return p, nil
}

// builds reports whether the file's //go:build line holds for
// linux/amd64, the platform of the services' images: the reference must
// not depend on the host that generates it.
func builds(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return true // the compiler reports it; document the file
			}
			return expr.Eval(func(tag string) bool {
				switch tag {
				case "linux", "amd64", "unix", "gc":
					return true
				}
				return strings.HasPrefix(tag, "go1.")
			})
		}
	}
	return true
}

// index records the file's type declarations and string constants.
func (p *pkg) index(f *file) {
	for _, d := range f.ast.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				doc := s.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				p.types[s.Name.Name] = typeDecl{spec: s, doc: doc, file: f}
			case *ast.ValueSpec:
				if gd.Tok != token.CONST || len(s.Values) != len(s.Names) {
					continue
				}
				for i, n := range s.Names {
					if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil {
							p.consts[n.Name] = v
						}
					}
				}
			}
		}
	}
}

// importOf is the import path that name refers to in f, "" when none.
func (l *loader) importOf(f *file, name string) (string, error) {
	for _, is := range f.imports {
		if is.name == name {
			return is.path, nil
		}
		if is.name != "" {
			continue
		}
		p, err := l.load(is.path)
		if err != nil {
			return "", err
		}
		if p != nil && p.name == name {
			return is.path, nil
		}
		// A package outside the workspace: its name is, by convention,
		// the path's last element without a major version.
		if p == nil && guessName(is.path) == name {
			return is.path, nil
		}
	}
	return "", nil
}

func guessName(importPath string) string {
	elems := strings.Split(importPath, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = elems[len(elems)-2]
	}
	return last
}
