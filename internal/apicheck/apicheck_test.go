package main

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gracepoll/gracepoll/poller"
)

// TestRun runs the program's checks: on Linux everything must work;
// elsewhere New must report ErrUnsupported.
func TestRun(t *testing.T) {
	if err := run(); err != nil && !errors.Is(err, poller.ErrUnsupported) {
		t.Fatal(err)
	}
}

// TestCoversAPI checks that main.go names every exported identifier of
// package poller (functions, types, constants, variables) as poller.X, and
// calls each exported method: for a method name that several types have
// (String), at least as many call sites as types. It reads the sources, so
// a method added to the package without a call here fails the test.
func TestCoversAPI(t *testing.T) {
	fset := token.NewFileSet()
	dir := filepath.Join("..", "..", "poller")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range ents {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	idents := map[string]bool{} // package-level exported names
	methods := map[string]int{} // exported method name -> types having it
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					idents[d.Name.Name] = true
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					methods[d.Name.Name]++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							idents[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								idents[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	if len(idents) < 20 || len(methods) < 15 {
		t.Fatalf("found only %d exported names and %d methods in %s", len(idents), len(methods), dir)
	}

	main, err := parser.ParseFile(fset, "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	calls := map[string]int{}
	ast.Inspect(main, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "poller" {
				named[n.Sel.Name] = true
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				calls[sel.Sel.Name]++
			}
		}
		return true
	})
	for name := range idents {
		if !named[name] {
			t.Errorf("main.go does not use poller.%s", name)
		}
	}
	for name, types := range methods {
		if calls[name] < types {
			t.Errorf("main.go calls .%s %d times; %d exported types of poller have that method", name, calls[name], types)
		}
	}
}
