package deploy_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// volumeSnapshotClass is snapshot.storage.k8s.io/v1 VolumeSnapshotClass, a
// CRD that client-go's scheme does not know; only its fields are allowed.
type volumeSnapshotClass struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Driver         string            `json:"driver"`
	DeletionPolicy string            `json:"deletionPolicy"`
	Parameters     map[string]string `json:"parameters,omitempty"`
}

// object is one decoded document.
type object struct {
	document
	obj  runtime.Object       // the typed object, for kinds in client-go's scheme
	vsc  *volumeSnapshotClass // for the VolumeSnapshotClass
	gvk  schema.GroupVersionKind
	meta metav1.Object // nil for the VolumeSnapshotClass
}

func (o object) name() string {
	if o.vsc != nil {
		return o.vsc.Metadata.Name
	}
	return o.meta.GetName()
}

func (o object) String() string {
	return fmt.Sprintf("deploy/%s:%d %s %s", o.file, o.line, o.gvk.Kind, o.name())
}

// strictYAML decodes YAML into the typed objects of client-go's scheme (the
// scheme behind scheme.Codecs), and fails on unknown and duplicate fields.
// scheme.Codecs' own deserializers are lenient (they drop unknown fields), so
// the strict serializer is built over the same scheme.
var strictYAML = k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	k8sjson.SerializerOptions{Yaml: true, Strict: true})

// decode decodes one document strictly.
func decode(d document) (object, error) {
	o := object{document: d}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return o, fmt.Errorf("%s: not YAML: %w", d, err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return o, fmt.Errorf("%s: apiVersion %q, kind %q: both must be set", d, tm.APIVersion, tm.Kind)
	}
	o.gvk = tm.GroupVersionKind()
	if o.gvk.Group == snapshotGroup {
		vsc, err := decodeVolumeSnapshotClass(d, tm)
		if err != nil {
			return o, err
		}
		o.vsc = vsc
		return o, nil
	}
	obj, gvk, err := strictYAML.Decode(d.data, nil, nil)
	if err != nil {
		return o, fmt.Errorf("%s: %s %s does not decode strictly: %w", d, tm.APIVersion, tm.Kind, err)
	}
	o.obj, o.gvk = obj, *gvk
	if o.meta, err = meta.Accessor(obj); err != nil {
		return o, fmt.Errorf("%s: %s has no metadata: %w", d, gvk.Kind, err)
	}
	if o.meta.GetName() == "" {
		return o, fmt.Errorf("%s: %s has no metadata.name", d, gvk.Kind)
	}
	return o, nil
}

func decodeVolumeSnapshotClass(d document, tm metav1.TypeMeta) (*volumeSnapshotClass, error) {
	if tm.Kind != "VolumeSnapshotClass" {
		return nil, fmt.Errorf("%s: %s %s: only VolumeSnapshotClass is checked in %s; add a local type for this kind", d, tm.APIVersion, tm.Kind, snapshotGroup)
	}
	// Duplicate keys: YAMLToJSONStrict refuses them.
	j, err := yaml.YAMLToJSONStrict(d.data)
	if err != nil {
		return nil, fmt.Errorf("%s: VolumeSnapshotClass: %w", d, err)
	}
	// Unknown fields.
	var v volumeSnapshotClass
	if err := yaml.Unmarshal(d.data, &v, yaml.DisallowUnknownFields); err != nil {
		return nil, fmt.Errorf("%s: VolumeSnapshotClass does not decode strictly: %w", d, err)
	}
	// encoding/json matches field names case-insensitively; the API server
	// does not, so a key must match its field exactly.
	var generic map[string]any
	if err := json.Unmarshal(j, &generic); err != nil {
		return nil, fmt.Errorf("%s: VolumeSnapshotClass: %w", d, err)
	}
	if err := exactFieldNames(generic, reflect.TypeOf(v), ""); err != nil {
		return nil, fmt.Errorf("%s: VolumeSnapshotClass: %w", d, err)
	}
	var problems []string
	if v.APIVersion != snapshotGroup+"/v1" {
		problems = append(problems, fmt.Sprintf("apiVersion is %q, want %q (the only version the current snapshot CRDs serve)", v.APIVersion, snapshotGroup+"/v1"))
	}
	if v.Metadata.Name == "" {
		problems = append(problems, "metadata.name is empty")
	}
	if v.Driver == "" {
		problems = append(problems, "driver is empty")
	}
	if v.DeletionPolicy != "Delete" && v.DeletionPolicy != "Retain" {
		problems = append(problems, fmt.Sprintf("deletionPolicy is %q, want Delete or Retain", v.DeletionPolicy))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: VolumeSnapshotClass %s: %s", d, v.Metadata.Name, strings.Join(problems, "; "))
	}
	return &v, nil
}

// exactFieldNames reports the first key of m that is not, with exactly that
// spelling, the JSON name of a field of struct type t.
func exactFieldNames(m map[string]any, t reflect.Type, at string) error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = f.Type
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ft, ok := fields[k]
		if !ok {
			for name := range fields {
				if strings.EqualFold(name, k) {
					return fmt.Errorf("field %s%s is spelled wrong: field names are case-sensitive, want %s%s", at, k, at, name)
				}
			}
			return fmt.Errorf("unknown field %s%s", at, k)
		}
		if sub, ok := m[k].(map[string]any); ok && ft.Kind() == reflect.Struct {
			if err := exactFieldNames(sub, ft, at+k+"."); err != nil {
				return err
			}
		}
	}
	return nil
}
