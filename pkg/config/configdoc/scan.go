package configdoc

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// loaderArgIndex says which argument of a call is a service's config
// struct: the loaders are service.Main(name, cfg, run), service.Run(ctx,
// name, cfg, run) and config.Load(cfg, getenv), by package directory
// relative to the root; -1 for any other function.
func loaderArgIndex(dir, fn string) int {
	switch {
	case dir == "pkg/service" && fn == "Main":
		return 1
	case dir == "pkg/service" && fn == "Run":
		return 2
	case dir == "pkg/config" && fn == "Load":
		return 0
	}
	return -1
}

// Scan reads the repository at root, the directory of its go.work, and
// returns the configuration of every main package directly under
// services/.
func Scan(root string) (*Model, error) {
	mods, err := readWorkspace(root)
	if err != nil {
		return nil, err
	}
	l := &loader{
		root:    root,
		fset:    token.NewFileSet(),
		modules: mods,
		pkgs:    map[string]*pkg{},
		structs: map[string]*Struct{},
	}
	entries, err := os.ReadDir(filepath.Join(root, "services"))
	if err != nil {
		return nil, fmt.Errorf("list the services: %w", err)
	}
	m := &Model{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		svc, err := l.service(e.Name())
		if err != nil {
			return nil, err
		}
		if svc != nil {
			m.Services = append(m.Services, svc)
		}
	}
	m.Groups = groups(m.Services)
	return m, nil
}

// groups lists the structs the services reach, other than their own config
// structs, and names each.
func groups(services []*Service) []*Struct {
	seen := map[string]*Struct{}
	var visit func(s *Struct)
	visit = func(s *Struct) {
		if seen[s.Key] != nil {
			return
		}
		seen[s.Key] = s
		for _, inc := range s.Includes {
			visit(inc.Struct)
		}
	}
	for _, svc := range services {
		for _, s := range svc.Own {
			for _, inc := range s.Includes {
				visit(inc.Struct)
			}
		}
		for _, s := range svc.Loads {
			visit(s)
		}
	}
	var out []*Struct
	dirs := map[string]map[string]bool{} // package name, directories
	for _, s := range seen {
		out = append(out, s)
		if dirs[s.Package] == nil {
			dirs[s.Package] = map[string]bool{}
		}
		dirs[s.Package][s.Dir] = true
	}
	// Two packages may share a name (pkg/service and the sandbox's own
	// service package); then their directories tell them apart.
	for _, s := range out {
		s.Ref = s.Package + "." + s.Name
		if len(dirs[s.Package]) > 1 {
			s.Ref = s.Dir + "." + s.Name
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// resolveStruct finds the struct type that expr names in f of p, following
// defined types and aliases; a nil package when it names no struct of the
// workspace (a builtin, a pointer, a type from another module).
func (l *loader) resolveStruct(p *pkg, f *file, expr ast.Expr, depth int) (*pkg, typeDecl, error) {
	if depth > 16 {
		return nil, typeDecl{}, fmt.Errorf("%s: type %s: defined types nest too deep", l.pos(expr), types.ExprString(expr))
	}
	var q *pkg
	var name string
	switch e := expr.(type) {
	case *ast.ParenExpr:
		return l.resolveStruct(p, f, e.X, depth+1)
	case *ast.Ident:
		q, name = p, e.Name
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return nil, typeDecl{}, nil
		}
		ip, err := l.importOf(f, x.Name)
		if err != nil || ip == "" {
			return nil, typeDecl{}, err
		}
		if q, err = l.load(ip); err != nil || q == nil {
			return nil, typeDecl{}, err
		}
		name = e.Sel.Name
	default:
		return nil, typeDecl{}, nil
	}
	d, ok := q.types[name]
	if !ok {
		return nil, typeDecl{}, nil
	}
	if _, ok := d.spec.Type.(*ast.StructType); ok {
		return q, d, nil
	}
	return l.resolveStruct(q, d.file, d.spec.Type, depth+1)
}

func (l *loader) pos(n ast.Node) string {
	p := l.fset.Position(n.Pos())
	rel, err := filepath.Rel(l.root, p.Filename)
	if err != nil {
		rel = p.Filename
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)
}

// structOf builds the Struct of a declaration resolveStruct found.
func (l *loader) structOf(p *pkg, d typeDecl) (*Struct, error) {
	key := p.path + "." + d.spec.Name.Name
	if s, ok := l.structs[key]; ok {
		return s, nil
	}
	s := &Struct{
		Key:        key,
		ImportPath: p.path,
		Dir:        p.dir,
		Package:    p.name,
		Name:       d.spec.Name.Name,
		Doc:        oneLine(d.doc),
	}
	l.structs[key] = s
	if err := l.fields(p, d.file, d.spec.Type.(*ast.StructType), s); err != nil {
		return nil, err
	}
	return s, nil
}

// fields adds st's fields to s as package config walks them: an exported
// field with an env tag is a variable; an exported struct field without
// one has its fields read as if they were s's.
func (l *loader) fields(p *pkg, f *file, st *ast.StructType, s *Struct) error {
	for _, fld := range st.Fields.List {
		var tag reflect.StructTag
		if fld.Tag != nil {
			raw, err := strconv.Unquote(fld.Tag.Value)
			if err != nil {
				return fmt.Errorf("%s: field tag %s: %w", l.pos(fld), fld.Tag.Value, err)
			}
			tag = reflect.StructTag(raw)
		}
		names := []string{embeddedName(fld.Type)}
		if len(fld.Names) > 0 {
			names = names[:0]
			for _, n := range fld.Names {
				names = append(names, n.Name)
			}
		}
		for _, name := range names {
			if !ast.IsExported(name) {
				continue
			}
			if env := tag.Get("env"); env != "" {
				doc := oneLine(fld.Doc)
				if doc == "" {
					doc = oneLine(fld.Comment)
				}
				s.Vars = append(s.Vars, &Var{
					Name:       env,
					Field:      name,
					Type:       types.ExprString(fld.Type),
					Default:    tag.Get("default"),
					Secret:     tag.Get("secret") == "true",
					Required:   tag.Get("required") == "true",
					Doc:        doc,
					DeclaredIn: s.Key,
				})
				continue
			}
			if inline, ok := fld.Type.(*ast.StructType); ok {
				if err := l.fields(p, f, inline, s); err != nil {
					return err
				}
				continue
			}
			q, d, err := l.resolveStruct(p, f, fld.Type, 0)
			if err != nil {
				return err
			}
			if q == nil {
				continue
			}
			inc, err := l.structOf(q, d)
			if err != nil {
				return err
			}
			var field string
			if len(fld.Names) > 0 {
				field = name
			}
			s.Includes = append(s.Includes, &Include{Struct: inc, Field: field})
		}
	}
	return nil
}

// embeddedName is the field name Go gives an embedded type.
func embeddedName(t ast.Expr) string {
	switch e := t.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.IndexExpr:
		return embeddedName(e.X)
	case *ast.IndexListExpr:
		return embeddedName(e.X)
	}
	return ""
}

// oneLine joins a comment's lines, as a table cell needs.
func oneLine(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	return strings.Join(strings.Fields(cg.Text()), " ")
}
