package renderer

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
)

func TestFieldDiff(t *testing.T) {
	tests := []struct {
		name     string
		old, new map[string]any
		want     []string
	}{
		{"equal", map[string]any{"a": 1}, map[string]any{"a": 1}, nil},
		{"scalar", map[string]any{"a": 1}, map[string]any{"a": 2}, []string{"a"}},
		{"added and removed", map[string]any{"a": 1}, map[string]any{"b": 1}, []string{"a", "b"}},
		{"one level into objects", map[string]any{"spec": map[string]any{"x": 1, "y": []any{1}}}, map[string]any{"spec": map[string]any{"x": 1, "y": []any{2}, "z": true}}, []string{"spec.y", "spec.z"}},
		{"object against scalar", map[string]any{"a": map[string]any{"x": 1}}, map[string]any{"a": "x"}, []string{"a"}},
		{"deeper is not split", map[string]any{"s": map[string]any{"r": map[string]any{"p": 1}}}, map[string]any{"s": map[string]any{"r": map[string]any{"p": 2}}}, []string{"s.r"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fieldDiff(tc.old, tc.new); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("fieldDiff = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestObjectChangesAreCapped: however much changed, a provenance holds at
// most MaxProvenanceChanged objects of at most MaxChangedFields fields,
// and counts the rest.
func TestObjectChangesAreCapped(t *testing.T) {
	m := map[string]*pendingChange{}
	oldTree, newTree := map[string]any{}, map[string]any{}
	for i := range msg.MaxChangedFields + 3 {
		oldTree[fmt.Sprint("f", i)], newTree[fmt.Sprint("f", i)] = 1, 2
	}
	old, err := index.ObjectOf(oldTree)
	if err != nil {
		t.Fatal(err)
	}
	new, err := index.ObjectOf(newTree)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msg.MaxProvenanceChanged + 5 {
		key := msg.ResourceKey("s", "svc", "ns", fmt.Sprintf("o%03d", i))
		m[key] = &pendingChange{typ: "svc", key: key, rev: uint64(i + 1), old: old, new: new}
	}
	// Written and deleted between two renders: no change.
	m["s.svc.ns.gone"] = &pendingChange{typ: "svc", key: "s.svc.ns.gone", rev: 99}
	out, more := objectChanges(m)
	if len(out) != msg.MaxProvenanceChanged || more != 5 {
		t.Fatalf("%d listed, %d more", len(out), more)
	}
	if out[0].Name != "o000" || len(out[0].Fields) != msg.MaxChangedFields || out[0].FieldsMore != 3 {
		t.Fatalf("first = %+v", out[0])
	}
}
