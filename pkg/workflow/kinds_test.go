package workflow

import (
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Every node type of the contract has one entry in the table, its name
// reads back, and every field it claims can be told set.
func TestKindsTable(t *testing.T) {
	for v, name := range novav1.NodeType_name {
		typ := novav1.NodeType(v)
		if typ == novav1.NodeType_NODE_TYPE_UNSPECIFIED {
			continue
		}
		k := KindOf(typ)
		if k == nil {
			t.Errorf("%s has no entry in the kinds table", name)
			continue
		}
		if ParseNodeType(k.Name) != typ || TypeName(typ) != k.Name {
			t.Errorf("%s: name %q does not read back", name, k.Name)
		}
		for _, f := range k.Fields {
			if fieldSet[f] == nil {
				t.Errorf("%s: field %q cannot be told set (fieldSet)", k.Name, f)
			}
		}
	}
	if len(kinds) != len(novav1.NodeType_name)-1 {
		t.Errorf("%d kinds for %d node types", len(kinds), len(novav1.NodeType_name)-1)
	}
}
