package runner

import (
	"slices"
	"testing"
)

func TestImportedModules(t *testing.T) {
	tests := []struct {
		code string
		want []string // nil with ok false
	}{
		{"context['x'] = 1", []string{}},
		{"import json\ncontext['x'] = json.dumps(1)", []string{"json"}},
		{"import os.path as p, re\nfrom collections.abc import Mapping", []string{"os", "re", "collections"}},
		{"x = 1; import math  # square roots\n", []string{"math"}},
		{"if True: import decimal", []string{"decimal"}},
		{"from statistics import (\n    mean,\n    median,\n)", []string{"statistics"}},
		{"try:\n    import numpy as np\nexcept ImportError:\n    np = None", []string{"numpy"}},
		{"import pandas\r\nimport json\r\n", []string{"pandas", "json"}},
		{"context['v'] = important_value", []string{}},
		// What it cannot be sure of.
		{"# import pandas when needed", nil},
		{"s = 'import pandas'", nil},
		{"from . import sibling", nil},
		{"import json, \\\n    pandas", nil},
		{"m = __import__('pandas')", nil},
		{"import importlib\nm = importlib.import_module('pandas')", nil},
		{"import 3d", nil},
		{"import a b", nil},
	}
	for _, tt := range tests {
		got, ok := importedModules(tt.code)
		if tt.want == nil {
			if ok {
				t.Errorf("%q: read as importing %v, want unsure", tt.code, got)
			}
			continue
		}
		if !ok || !slices.Equal(got, tt.want) {
			t.Errorf("%q: got %v (ok %v), want %v", tt.code, got, ok, tt.want)
		}
	}
}
