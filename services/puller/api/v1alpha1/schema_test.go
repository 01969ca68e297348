package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// crdDir is deploy/k8s/crds of the repository.
var crdDir = filepath.Join("..", "..", "..", "..", "deploy", "k8s", "crds")

// readCRD reads the CustomResourceDefinition of plural from crdDir.
func readCRD(t *testing.T, plural string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, "weft.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// openAPISchema is the v1alpha1 schema of crd.
func openAPISchema(t *testing.T, crd map[string]any) map[string]any {
	t.Helper()
	for _, v := range get[[]any](crd, "spec", "versions") {
		v := v.(map[string]any)
		if v["name"] == v1alpha1.Version {
			return get[map[string]any](v, "schema", "openAPIV3Schema")
		}
	}
	t.Fatalf("no version %s", v1alpha1.Version)
	return nil
}

func get[T any](m map[string]any, path ...string) T {
	var cur any = m
	for _, p := range path {
		mm, _ := cur.(map[string]any)
		cur = mm[p]
	}
	v, _ := cur.(T)
	return v
}

// TestTypesMatchSchema walks each Go type and its CRD's schema together:
// every json field has a property of the matching type and every property
// a field, and a property is required exactly when its field is not
// omitempty.
func TestTypesMatchSchema(t *testing.T) {
	for _, tc := range []struct {
		plural string
		typ    reflect.Type
		scope  string
		kind   string
	}{
		{v1alpha1.PolicyPlural, reflect.TypeFor[v1alpha1.PrePullPolicy](), "Cluster", v1alpha1.PolicyKind},
		{v1alpha1.ImagePlural, reflect.TypeFor[v1alpha1.PrePullImage](), "Namespaced", v1alpha1.ImageKind},
	} {
		t.Run(tc.plural, func(t *testing.T) {
			crd := readCRD(t, tc.plural)
			if got := get[string](crd, "metadata", "name"); got != tc.plural+"."+v1alpha1.Group {
				t.Errorf("name %q", got)
			}
			if got := get[string](crd, "spec", "scope"); got != tc.scope {
				t.Errorf("scope %q, want %q", got, tc.scope)
			}
			if got := get[string](crd, "spec", "names", "kind"); got != tc.kind {
				t.Errorf("kind %q, want %q", got, tc.kind)
			}
			var problems []string
			walk(tc.typ, openAPISchema(t, crd), "", &problems)
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

var (
	timeType     = reflect.TypeFor[metav1.Time]()
	durationType = reflect.TypeFor[metav1.Duration]()
	quantityType = reflect.TypeFor[resource.Quantity]()
	typeMeta     = reflect.TypeFor[metav1.TypeMeta]()
	objectMeta   = reflect.TypeFor[metav1.ObjectMeta]()
)

func walk(typ reflect.Type, schema map[string]any, path string, problems *[]string) {
	fail := func(format string, args ...any) {
		*problems = append(*problems, fmt.Sprintf("%s: ", orRoot(path))+fmt.Sprintf(format, args...))
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := func(schemaType string) {
		if got, _ := schema["type"].(string); got != schemaType {
			fail("Go %s, schema type %q, want %q", typ, got, schemaType)
		}
	}
	switch {
	case typ == timeType:
		want("string")
		if schema["format"] != "date-time" {
			fail("a time without format date-time")
		}
		return
	case typ == durationType:
		want("string")
		if schema["pattern"] == nil {
			fail("a duration without a pattern")
		}
		return
	case typ == quantityType:
		if schema["x-kubernetes-int-or-string"] != true {
			fail("a quantity that is not int-or-string")
		}
		return
	case typ == objectMeta:
		want("object")
		return
	}
	switch typ.Kind() {
	case reflect.String:
		want("string")
	case reflect.Bool:
		want("boolean")
	case reflect.Int32, reflect.Int64:
		want("integer")
		if f := fmt.Sprintf("int%d", typ.Bits()); schema["format"] != f {
			fail("Go %s, schema format %v", typ, schema["format"])
		}
	case reflect.Slice:
		want("array")
		items, _ := schema["items"].(map[string]any)
		walk(typ.Elem(), items, path+"[]", problems)
	case reflect.Map:
		want("object")
		values, _ := schema["additionalProperties"].(map[string]any)
		walk(typ.Elem(), values, path+"{}", problems)
	case reflect.Struct:
		want("object")
		walkStruct(typ, schema, path, problems)
	default:
		fail("Go kind %s not handled", typ.Kind())
	}
}

func walkStruct(typ reflect.Type, schema map[string]any, path string, problems *[]string) {
	props, _ := schema["properties"].(map[string]any)
	var required []string
	for _, r := range get[[]any](schema, "required") {
		required = append(required, r.(string))
	}
	fields := map[string]reflect.StructField{}
	jsonFields(typ, fields)
	for name, f := range fields {
		p := path + "." + name
		prop, ok := props[name].(map[string]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: Go field %s.%s has no schema property", p, typ.Name(), f.Name))
			continue
		}
		omitempty := strings.Contains(f.Tag.Get("json"), ",omitempty")
		if isRequired := slices.Contains(required, name); isRequired == omitempty {
			*problems = append(*problems, fmt.Sprintf("%s: schema required=%v but Go omitempty=%v", p, isRequired, omitempty))
		}
		walk(f.Type, prop, p, problems)
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			*problems = append(*problems, fmt.Sprintf("%s.%s: schema property has no Go field in %s", path, name, typ))
		}
	}
}

// jsonFields collects typ's fields by json name, inlining embedded ones.
func jsonFields(typ reflect.Type, into map[string]reflect.StructField) {
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			if f.Type == typeMeta {
				into["apiVersion"] = reflect.StructField{Name: "APIVersion", Type: reflect.TypeFor[string](), Tag: `json:"apiVersion,omitempty"`}
				into["kind"] = reflect.StructField{Name: "Kind", Type: reflect.TypeFor[string](), Tag: `json:"kind,omitempty"`}
				continue
			}
			jsonFields(f.Type, into)
			continue
		}
		into[name] = f
	}
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

// TestSchemaDefaults keeps the schema's defaults equal to the Go constants
// Default fills in.
func TestSchemaDefaults(t *testing.T) {
	spec := get[map[string]any](openAPISchema(t, readCRD(t, v1alpha1.PolicyPlural)), "properties", "spec", "properties")
	def := func(path ...string) any {
		p := spec
		for _, k := range path[:len(path)-1] {
			p = get[map[string]any](p, k, "properties")
		}
		return get[map[string]any](p, path[len(path)-1])["default"]
	}
	dur := time.Duration.String
	for _, tc := range []struct {
		path []string
		want any
	}{
		{[]string{"mode"}, string(v1alpha1.DefaultMode)},
		{[]string{"limits", "cluster"}, float64(v1alpha1.DefaultCluster)},
		{[]string{"limits", "perNode"}, float64(v1alpha1.DefaultPerNode)},
		{[]string{"limits", "perRegistry"}, float64(v1alpha1.DefaultPerRegistry)},
		{[]string{"retry", "maxAttempts"}, float64(v1alpha1.DefaultMaxAttempts)},
		{[]string{"retry", "backoff"}, dur(v1alpha1.DefaultBackoff)},
		{[]string{"retry", "maxBackoff"}, dur(v1alpha1.DefaultMaxBackoff)},
		{[]string{"ttl"}, dur(v1alpha1.DefaultTTL)},
		{[]string{"job", "timeout"}, dur(v1alpha1.DefaultJobTimeout)},
		{[]string{"gateTimeout"}, dur(v1alpha1.DefaultGateTimeout)},
		{[]string{"gate"}, false},
	} {
		got := def(tc.path...)
		if s, ok := got.(string); ok {
			if d, err := time.ParseDuration(s); err == nil {
				got = d.String()
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("spec.%s: schema default %v, Go default %v", strings.Join(tc.path, "."), got, tc.want)
		}
	}
}
