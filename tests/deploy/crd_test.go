package deploy_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

// The CRD is decoded strictly like every other kind.
func init() {
	if err := apiextensionsv1.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
}

func replicatedVolumeCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	m := mustLoad(t)
	for _, o := range m.objects {
		if crd, ok := o.obj.(*apiextensionsv1.CustomResourceDefinition); ok && crd.Spec.Group == rvapi.Group && crd.Spec.Names.Kind == rvapi.Kind {
			return crd
		}
	}
	t.Fatalf("deploy/ defines no CustomResourceDefinition for %s %s", rvapi.Group, rvapi.Kind)
	return nil
}

// The API server prunes every field its schema does not name, silently:
// a field of the Go types missing from the schema would be written and
// never read back. Each side must name exactly the other's fields.
func TestTheReplicatedVolumeSchemaNamesExactlyTheGoTypesFields(t *testing.T) {
	crd := replicatedVolumeCRD(t)
	if crd.Name != rvapi.Resource+"."+rvapi.Group || crd.Spec.Scope != apiextensionsv1.ClusterScoped ||
		!slices.Contains(crd.Spec.Names.ShortNames, "rv") || crd.Spec.Names.Plural != rvapi.Resource {
		t.Errorf("CRD %s: scope %s, plural %s, short names %v; want %s.%s, Cluster, %s, [rv]",
			crd.Name, crd.Spec.Scope, crd.Spec.Names.Plural, crd.Spec.Names.ShortNames, rvapi.Resource, rvapi.Group, rvapi.Resource)
	}
	var served *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == rvapi.Version {
			served = &crd.Spec.Versions[i]
		}
	}
	if served == nil || !served.Served || !served.Storage || served.Subresources == nil || served.Subresources.Status == nil {
		t.Fatalf("version %s must be served, stored and have the status subresource (the compare-and-swap writes status only)", rvapi.Version)
	}
	root := served.Schema.OpenAPIV3Schema
	typ := reflect.TypeOf(rvapi.ReplicatedVolume{})
	for _, part := range []string{"spec", "status"} {
		f, _ := typ.FieldByName(strings.ToUpper(part[:1]) + part[1:])
		compareSchema(t, part, root.Properties[part], f.Type)
	}
	for _, c := range served.AdditionalPrinterColumns {
		if !strings.HasPrefix(c.JSONPath, ".metadata.") && lookup(root, c.JSONPath) == nil {
			t.Errorf("printer column %s shows %s, which the schema does not define", c.Name, c.JSONPath)
		}
	}
	var cols []string
	for _, c := range served.AdditionalPrinterColumns {
		cols = append(cols, c.Name)
	}
	if want := "CLAIM CLAIM NAMESPACE RF READY PRIMARY NEWEST SNAPSHOT AGE MAX LAG TRANSFERS PHASE AGE"; strings.Join(cols, " ") != want {
		t.Errorf("printer columns %q, want %q", strings.Join(cols, " "), want)
	}
}

func compareSchema(t *testing.T, path string, s apiextensionsv1.JSONSchemaProps, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		if typ.Kind() == reflect.Slice {
			if s.Items == nil || s.Items.Schema == nil {
				t.Errorf("%s: a list in Go, no items schema in the CRD", path)
				return
			}
			s = *s.Items.Schema
			path += "[]"
		}
		typ = typ.Elem()
	}
	if typ.Kind() == reflect.Map {
		// A map of the Go types is an object of named keys (the keys Ferry
		// reads; the server prunes the others), each of the map's type.
		if s.Type != "object" || len(s.Properties) == 0 {
			t.Errorf("%s: type %q with %d named keys in the CRD, a map in Go", path, s.Type, len(s.Properties))
		}
		for k, sub := range s.Properties {
			compareSchema(t, path+"."+k, sub, typ.Elem())
		}
		return
	}
	if typ == reflect.TypeFor[metav1.Time]() {
		// An API time is an RFC 3339 string on the wire.
		if s.Type != "string" || s.Format != "date-time" {
			t.Errorf("%s: type %q format %q in the CRD, a time (string, date-time) in Go", path, s.Type, s.Format)
		}
		return
	}
	if typ.Kind() != reflect.Struct {
		want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int: "integer", reflect.Int64: "integer"}[typ.Kind()]
		if s.Type != want {
			t.Errorf("%s: type %q in the CRD, %s in Go", path, s.Type, typ.Kind())
		}
		return
	}
	if s.Type != "object" {
		t.Errorf("%s: type %q in the CRD, a struct in Go", path, s.Type)
	}
	goFields := map[string]reflect.Type{}
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		goFields[name] = typ.Field(i).Type
	}
	var names []string
	for n := range goFields {
		names = append(names, n)
	}
	for n := range s.Properties {
		if _, ok := goFields[n]; !ok {
			t.Errorf("%s.%s: in the CRD, not in the Go types", path, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		sub, ok := s.Properties[n]
		if !ok {
			t.Errorf("%s.%s: in the Go types, not in the CRD (the API server would prune it)", path, n)
			continue
		}
		compareSchema(t, path+"."+n, sub, goFields[n])
	}
}

func lookup(s *apiextensionsv1.JSONSchemaProps, jsonPath string) *apiextensionsv1.JSONSchemaProps {
	for _, p := range strings.Split(strings.TrimPrefix(jsonPath, "."), ".") {
		sub, ok := s.Properties[p]
		if !ok {
			return nil
		}
		s = &sub
	}
	return s
}
