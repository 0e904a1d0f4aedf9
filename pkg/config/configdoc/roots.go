package configdoc

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
)

// service reads services/<name>: nil when it holds no main package.
func (l *loader) service(name string) (*Service, error) {
	dir := "services/" + name
	matches, err := filepath.Glob(filepath.Join(l.root, "services", name, "*.go"))
	if err != nil || len(matches) == 0 {
		return nil, err // no Go: documentation, data, and the like
	}
	ip, ok := l.importPathOf(dir)
	if !ok {
		return nil, fmt.Errorf("%s is in no module of go.work, so its imports cannot be followed", dir)
	}
	p, err := l.load(ip)
	if err != nil || p == nil || p.name != "main" {
		return nil, err
	}
	svc := &Service{Name: name, Dir: dir}
	if err := l.roots(p, svc); err != nil {
		return nil, err
	}
	if len(svc.Own) == 0 && len(svc.Loads) == 0 {
		// No loader call found: the convention is a struct named config.
		if d, ok := p.types["config"]; ok {
			if _, ok := d.spec.Type.(*ast.StructType); ok {
				s, err := l.structOf(p, d)
				if err != nil {
					return nil, err
				}
				svc.Own = append(svc.Own, s)
			}
		}
	}
	if svc.Direct, err = l.directReads(p); err != nil {
		return nil, err
	}
	return svc, nil
}

// roots finds the structs main package p hands to a loader: those declared
// in p go to svc.Own, others to svc.Loads, each once, in source order.
func (l *loader) roots(p *pkg, svc *Service) error {
	for _, f := range p.files {
		for _, decl := range f.ast.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var err error
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if err != nil {
					return false
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var arg ast.Expr
				if arg, err = l.loaderArg(f, call); err != nil || arg == nil {
					return err == nil
				}
				err = l.addRoots(p, f, fn, call, arg, svc)
				return err == nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// loaderArg is the config argument when call is one of the loaders.
func (l *loader) loaderArg(f *file, call *ast.CallExpr) (ast.Expr, error) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return nil, nil
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return nil, nil
	}
	ip, err := l.importOf(f, x.Name)
	if err != nil || ip == "" {
		return nil, err
	}
	dir, ok := l.dirOf(ip)
	if !ok {
		return nil, nil
	}
	if i := loaderArgIndex(dir, sel.Sel.Name); i >= 0 && i < len(call.Args) {
		return call.Args[i], nil
	}
	return nil, nil
}

func (l *loader) addRoots(p *pkg, f *file, fn *ast.FuncDecl, call *ast.CallExpr, arg ast.Expr, svc *Service) error {
	ts, err := l.exprTypes(scope{p, f, fn}, arg, 0)
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return fmt.Errorf("%s: cannot tell the struct type of %s passed to %s; pass &v where v is declared with its type (var v T)",
			l.pos(call), types.ExprString(arg), types.ExprString(call.Fun))
	}
	for _, t := range ts {
		star, ok := t.expr.(*ast.StarExpr)
		if !ok {
			return fmt.Errorf("%s: %s passed to %s is a %s, not a pointer to a struct",
				l.pos(call), types.ExprString(arg), types.ExprString(call.Fun), types.ExprString(t.expr))
		}
		q, d, err := l.resolveStruct(t.p, t.f, star.X, 0)
		if err != nil {
			return err
		}
		if q == nil {
			return fmt.Errorf("%s: %s passed to %s is no struct of the workspace",
				l.pos(call), types.ExprString(star.X), types.ExprString(call.Fun))
		}
		s, err := l.structOf(q, d)
		if err != nil {
			return err
		}
		switch {
		case q == p && !slices.Contains(svc.Own, s):
			svc.Own = append(svc.Own, s)
		case q != p && !slices.Contains(svc.Loads, s):
			svc.Loads = append(svc.Loads, s)
		}
	}
	return nil
}

// scope is where an expression is written: its package, its file, and the
// function whose local variables it may name (nil outside one).
type scope struct {
	p  *pkg
	f  *file
	fn *ast.FuncDecl
}

// typeRef is a type expression with the file it must be read in: a field's
// type names packages by the imports of the field's file.
type typeRef struct {
	expr ast.Expr
	p    *pkg
	f    *file
}

// exprTypes is the static type of e as far as declarations tell it without
// a type checker: &v and v for variables declared with a type or a
// composite literal, &T{...}, new(T), x.F for a field of a known struct,
// and a range variable over a literal list, which has the types of each
// element. Empty when it cannot tell.
func (l *loader) exprTypes(sc scope, e ast.Expr, depth int) ([]typeRef, error) {
	if depth > 16 {
		return nil, fmt.Errorf("%s: %s: declarations nest too deep to follow", l.pos(e), types.ExprString(e))
	}
	switch v := e.(type) {
	case *ast.ParenExpr:
		return l.exprTypes(sc, v.X, depth+1)
	case *ast.CompositeLit:
		if v.Type == nil {
			return nil, nil
		}
		return []typeRef{{v.Type, sc.p, sc.f}}, nil
	case *ast.UnaryExpr:
		if v.Op != token.AND {
			return nil, nil
		}
		ts, err := l.exprTypes(sc, v.X, depth+1)
		for i := range ts {
			ts[i].expr = &ast.StarExpr{X: ts[i].expr}
		}
		return ts, err
	case *ast.CallExpr:
		if id, ok := v.Fun.(*ast.Ident); ok && id.Name == "new" && len(v.Args) == 1 {
			return []typeRef{{&ast.StarExpr{X: v.Args[0]}, sc.p, sc.f}}, nil
		}
	case *ast.Ident:
		return l.varTypes(sc, v.Name, depth)
	case *ast.SelectorExpr:
		return l.fieldTypes(sc, v, depth)
	}
	return nil, nil
}

// varTypes finds the declaration of the variable name in sc's function,
// else at package level, and the types it gives.
func (l *loader) varTypes(sc scope, name string, depth int) ([]typeRef, error) {
	var fromSpec func(vs *ast.ValueSpec, in scope) ([]typeRef, bool, error)
	fromSpec = func(vs *ast.ValueSpec, in scope) ([]typeRef, bool, error) {
		for i, n := range vs.Names {
			if n.Name != name {
				continue
			}
			if vs.Type != nil {
				return []typeRef{{vs.Type, in.p, in.f}}, true, nil
			}
			if i < len(vs.Values) && len(vs.Values) == len(vs.Names) {
				ts, err := l.exprTypes(in, vs.Values[i], depth+1)
				return ts, true, err
			}
			return nil, true, nil
		}
		return nil, false, nil
	}
	if sc.fn != nil {
		var out []typeRef
		var found bool
		var err error
		ast.Inspect(sc.fn.Body, func(n ast.Node) bool {
			if found || err != nil {
				return false
			}
			switch s := n.(type) {
			case *ast.ValueSpec:
				out, found, err = fromSpec(s, sc)
			case *ast.AssignStmt:
				if s.Tok != token.DEFINE || len(s.Lhs) != len(s.Rhs) {
					return true
				}
				for i, lhs := range s.Lhs {
					if id, ok := lhs.(*ast.Ident); ok && id.Name == name {
						out, err = l.exprTypes(sc, s.Rhs[i], depth+1)
						found = true
					}
				}
			case *ast.RangeStmt:
				// for _, cfg := range []any{&a, &b}: cfg is each element.
				id, ok := s.Value.(*ast.Ident)
				lit, isLit := s.X.(*ast.CompositeLit)
				if s.Tok != token.DEFINE || !ok || id.Name != name || !isLit {
					return true
				}
				found = true
				for _, elt := range lit.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok {
						elt = kv.Value
					}
					ts, e := l.exprTypes(sc, elt, depth+1)
					if e != nil || len(ts) == 0 {
						out, err = nil, e
						return false // one element unknown: the whole is
					}
					out = append(out, ts...)
				}
			}
			return true
		})
		if found || err != nil {
			return out, err
		}
	}
	for _, f := range sc.p.files {
		for _, d := range f.ast.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				if out, found, err := fromSpec(spec.(*ast.ValueSpec), scope{sc.p, f, nil}); found || err != nil {
					return out, err
				}
			}
		}
	}
	return nil, nil
}

// fieldTypes is the type of x.F where x's type is a struct of the
// workspace, read in the file that declares the struct.
func (l *loader) fieldTypes(sc scope, sel *ast.SelectorExpr, depth int) ([]typeRef, error) {
	xs, err := l.exprTypes(sc, sel.X, depth+1)
	if err != nil {
		return nil, err
	}
	var out []typeRef
	for _, x := range xs {
		expr := x.expr
		if star, ok := expr.(*ast.StarExpr); ok {
			expr = star.X
		}
		q, d, err := l.resolveStruct(x.p, x.f, expr, 0)
		if err != nil || q == nil {
			return nil, err
		}
		for _, fld := range d.spec.Type.(*ast.StructType).Fields.List {
			for _, n := range fld.Names {
				if n.Name == sel.Sel.Name {
					out = append(out, typeRef{fld.Type, q, d.file})
				}
			}
		}
	}
	return out, nil
}
