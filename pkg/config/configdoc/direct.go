package configdoc

import (
	"fmt"
	"go/ast"
	"go/token"
	"sort"
	"strconv"
)

// directReads finds os.Getenv and os.LookupEnv calls with a constant name
// in p and every workspace package it imports, directly or not.
func (l *loader) directReads(p *pkg) ([]*DirectRead, error) {
	files := map[string]map[string]bool{} // variable, file
	seen := map[string]bool{p.path: true}
	queue := []*pkg{p}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for _, f := range q.files {
			for _, is := range f.imports {
				if seen[is.path] {
					continue
				}
				seen[is.path] = true
				dep, err := l.load(is.path)
				if err != nil {
					return nil, err
				}
				if dep != nil {
					queue = append(queue, dep)
				}
			}
			names, err := l.getenvCalls(q, f)
			if err != nil {
				return nil, err
			}
			for _, n := range names {
				if files[n] == nil {
					files[n] = map[string]bool{}
				}
				files[n][f.rel] = true
			}
		}
	}
	var out []*DirectRead
	for name, set := range files {
		dr := &DirectRead{Name: name}
		for rel := range set {
			dr.Files = append(dr.Files, rel)
		}
		sort.Strings(dr.Files)
		out = append(out, dr)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// getenvCalls lists the variables f reads with os.Getenv or os.LookupEnv.
func (l *loader) getenvCalls(q *pkg, f *file) ([]string, error) {
	var names []string
	var err error
	ast.Inspect(f.ast, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || err != nil || len(call.Args) != 1 {
			return err == nil
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		var ip, name string
		if ip, err = l.importOf(f, x.Name); err != nil || ip != "os" {
			return err == nil
		}
		if name, err = l.constString(q, f, call.Args[0]); err != nil || name == "" {
			return err == nil // a name computed at run time: nothing to list
		}
		names = append(names, name)
		return true
	})
	return names, err
}

// constString is the value of a string literal or a string constant of
// the workspace, "" for anything else.
func (l *loader) constString(q *pkg, f *file, e ast.Expr) (string, error) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind == token.STRING {
			s, err := strconv.Unquote(v.Value)
			if err != nil {
				return "", fmt.Errorf("%s: %w", l.pos(v), err)
			}
			return s, nil
		}
	case *ast.Ident:
		return q.consts[v.Name], nil
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		if !ok {
			return "", nil
		}
		ip, err := l.importOf(f, x.Name)
		if err != nil || ip == "" {
			return "", err
		}
		dep, err := l.load(ip)
		if err != nil || dep == nil {
			return "", err
		}
		return dep.consts[v.Sel.Name], nil
	}
	return "", nil
}
