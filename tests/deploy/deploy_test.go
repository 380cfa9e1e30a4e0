package deploy_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/ferry-csi/ferry/domain/volume"
)

const (
	// manifestDir is deploy/, relative to this package's directory (go test
	// runs in it).
	manifestDir = "../../deploy"
	// ferryCmd is the ferry binary's main package, for `go run`.
	ferryCmd = "../../cmd/ferry"
	// driverName is the CSI driver name every object must agree on.
	driverName = "ferry.zfs.csi.io"
	// snapshotGroup is the external-snapshotter CRDs' API group, which is not
	// in client-go's scheme.
	snapshotGroup = "snapshot.storage.k8s.io"
)

// allowedStorageClassParameters are the StorageClass parameter keys a Ferry
// StorageClass may set. volume.ParseParams also accepts the
// csi.storage.k8s.io/* keys that the external-provisioner adds itself with
// --extra-create-metadata; in a StorageClass those keys name CSI secrets,
// which Ferry must never be given, so they are not allowed here.
var allowedStorageClassParameters = []string{"replicationFactor", "pool", "snapshotInterval", "compression", "recordsize", "atime"}

// readVerbs are the only verbs that do not write.
var readVerbs = []string{"get", "list", "watch"}

// ---------------------------------------------------------------------------
// Loading

// kustomization is the part of deploy/kustomization.yaml these checks read.
type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
}

func readKustomization() (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(manifestDir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return k, fmt.Errorf("deploy/kustomization.yaml: %w", err)
	}
	return k, nil
}

// document is one YAML document of a manifest file.
type document struct {
	file  string // base name, e.g. rbac-node.yaml
	line  int    // 1-based line of the document's first non-comment line
	index int    // 1-based position of the document in its file
	data  []byte
}

func (d document) String() string {
	return fmt.Sprintf("deploy/%s:%d (document %d)", d.file, d.line, d.index)
}

// splitDocuments splits a YAML stream at its `---` lines. Documents with
// nothing but comments and blank lines are dropped.
func splitDocuments(file string, data []byte) []document {
	var docs []document
	var cur []string
	first, skipped := 0, 0
	flush := func(next int) {
		if first != 0 {
			// Blank lines in place of the lines before the document keep
			// the YAML parser's "line N" equal to the line in the file.
			text := strings.Repeat("\n", skipped) + strings.Join(cur, "\n") + "\n"
			docs = append(docs, document{file: file, line: first, index: len(docs) + 1, data: []byte(text)})
		}
		cur, first, skipped = nil, 0, next
	}
	for i, l := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimRight(l, " \t\r")
		if trimmed == "---" || strings.HasPrefix(trimmed, "--- ") {
			flush(i + 1)
			continue
		}
		cur = append(cur, l)
		if s := strings.TrimSpace(l); first == 0 && s != "" && !strings.HasPrefix(s, "#") {
			first = i + 1
		}
	}
	flush(0)
	return docs
}

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

// manifests are every decoded object of the resources kustomization.yaml
// lists, in order.
type manifests struct {
	namespace string // kustomization.yaml namespace:
	objects   []object
}

var (
	loadOnce   sync.Once
	loaded     *manifests
	loadErrors []string
)

// load reads and decodes every document of every listed resource once.
func load() (*manifests, []string) {
	loadOnce.Do(func() {
		k, err := readKustomization()
		if err != nil {
			loadErrors = append(loadErrors, err.Error())
			return
		}
		loaded = &manifests{namespace: k.Namespace}
		for _, r := range k.Resources {
			docs, err := readDocuments(r)
			if err != nil {
				loadErrors = append(loadErrors, err.Error())
				continue
			}
			for _, d := range docs {
				o, err := decode(d)
				if err != nil {
					loadErrors = append(loadErrors, err.Error())
					continue
				}
				loaded.objects = append(loaded.objects, o)
			}
		}
	})
	return loaded, loadErrors
}

// mustLoad returns the manifests, or stops a test that cannot run without
// them.
func mustLoad(t *testing.T) *manifests {
	t.Helper()
	m, errs := load()
	if len(errs) > 0 {
		where, _, _ := strings.Cut(errs[0], ": ")
		t.Fatalf("cannot check: %d manifest problem(s) stop the manifests from loading, the first at %s; TestEveryDocumentDecodesStrictlyIntoItsTypedObject reports each", len(errs), where)
	}
	return m
}

func readDocuments(resource string) ([]document, error) {
	data, err := os.ReadFile(filepath.Join(manifestDir, filepath.FromSlash(resource)))
	if err != nil {
		return nil, fmt.Errorf("deploy/%s (listed in deploy/kustomization.yaml): %w", resource, err)
	}
	docs := splitDocuments(resource, data)
	if len(docs) == 0 {
		return nil, fmt.Errorf("deploy/%s has no YAML documents", resource)
	}
	return docs, nil
}

// namespaceOf is the namespace an object is applied in with
// `kubectl apply -k deploy/`: kustomize's namespace: overrides every
// namespaced object's own.
func (m *manifests) namespaceOf(o object) string {
	if m.namespace != "" {
		return m.namespace
	}
	if ns := o.meta.GetNamespace(); ns != "" {
		return ns
	}
	return "default"
}

// subjectNamespace is a ServiceAccount subject's namespace after kustomize:
// its default (setRoleBindingSubjects: defaultOnly) rewrites only subjects
// whose namespace is empty or "default".
func (m *manifests) subjectNamespace(s rbacv1.Subject) string {
	if m.namespace != "" && (s.Namespace == "" || s.Namespace == "default") {
		return m.namespace
	}
	return s.Namespace
}

func typed[T runtime.Object](m *manifests) []T {
	var out []T
	for _, o := range m.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func (m *manifests) where(obj runtime.Object) object {
	for _, o := range m.objects {
		if o.obj == obj {
			return o
		}
	}
	panic("object not loaded")
}

// ---------------------------------------------------------------------------
// Roles, bindings and workloads

// role is a ClusterRole or a Role.
type role struct {
	object
	kind, name, namespace string // namespace is empty for a ClusterRole
	rules                 []rbacv1.PolicyRule
	aggregated            bool
}

func (m *manifests) roles() []role {
	var out []role
	for _, cr := range typed[*rbacv1.ClusterRole](m) {
		out = append(out, role{object: m.where(cr), kind: "ClusterRole", name: cr.Name, rules: cr.Rules, aggregated: cr.AggregationRule != nil})
	}
	for _, r := range typed[*rbacv1.Role](m) {
		o := m.where(r)
		out = append(out, role{object: o, kind: "Role", name: r.Name, namespace: m.namespaceOf(o), rules: r.Rules})
	}
	return out
}

// binding is a ClusterRoleBinding or a RoleBinding.
type binding struct {
	object
	namespace string // empty for a ClusterRoleBinding
	subjects  []rbacv1.Subject
	roleRef   rbacv1.RoleRef
}

func (m *manifests) bindings() []binding {
	var out []binding
	for _, b := range typed[*rbacv1.ClusterRoleBinding](m) {
		out = append(out, binding{object: m.where(b), subjects: b.Subjects, roleRef: b.RoleRef})
	}
	for _, b := range typed[*rbacv1.RoleBinding](m) {
		o := m.where(b)
		out = append(out, binding{object: o, namespace: m.namespaceOf(o), subjects: b.Subjects, roleRef: b.RoleRef})
	}
	return out
}

// boundRole is the role a binding grants, or an error when it is not one
// the manifests define (then its rules cannot be checked).
func (m *manifests) boundRole(b binding) (role, error) {
	if b.roleRef.APIGroup != rbacv1.GroupName {
		return role{}, fmt.Errorf("%s: roleRef.apiGroup is %q, want %q", b, b.roleRef.APIGroup, rbacv1.GroupName)
	}
	if b.roleRef.Kind == "Role" && b.namespace == "" {
		return role{}, fmt.Errorf("%s: a ClusterRoleBinding cannot refer to a Role (roleRef %s)", b, b.roleRef.Name)
	}
	for _, r := range m.roles() {
		if r.kind == b.roleRef.Kind && r.name == b.roleRef.Name && (r.kind == "ClusterRole" || r.namespace == b.namespace) {
			return r, nil
		}
	}
	return role{}, fmt.Errorf("%s: roleRef %s %q is not defined in the manifests, so what it grants is not checked", b, b.roleRef.Kind, b.roleRef.Name)
}

// bindsServiceAccount reports whether b names the ServiceAccount ns/name.
func (m *manifests) bindsServiceAccount(b binding, ns, name string) bool {
	for _, s := range b.subjects {
		if s.Kind == rbacv1.ServiceAccountKind && s.Name == name && m.subjectNamespace(s) == ns {
			return true
		}
	}
	return false
}

// rolesOf are the roles bound to the ServiceAccount ns/name, and an error for
// every binding of it whose role is not defined in the manifests.
func (m *manifests) rolesOf(ns, name string) ([]role, []error) {
	var roles []role
	var errs []error
	for _, b := range m.bindings() {
		if !m.bindsServiceAccount(b, ns, name) {
			continue
		}
		r, err := m.boundRole(b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		roles = append(roles, r)
	}
	return roles, errs
}

// workload is a DaemonSet or a Deployment, and the ferry mode it runs.
type workload struct {
	object
	namespace string
	mode      string
	selector  *metav1.LabelSelector
	template  corev1.PodTemplateSpec
}

func (m *manifests) workloads() []workload {
	var out []workload
	for _, ds := range typed[*appsv1.DaemonSet](m) {
		o := m.where(ds)
		out = append(out, workload{object: o, namespace: m.namespaceOf(o), mode: "daemon", selector: ds.Spec.Selector, template: ds.Spec.Template})
	}
	for _, d := range typed[*appsv1.Deployment](m) {
		o := m.where(d)
		out = append(out, workload{object: o, namespace: m.namespaceOf(o), mode: "controller", selector: d.Spec.Selector, template: d.Spec.Template})
	}
	return out
}

// mustWorkloads returns the workloads, failing unless there is a DaemonSet
// and a Deployment.
func mustWorkloads(t *testing.T, m *manifests) []workload {
	t.Helper()
	ws := m.workloads()
	for _, mode := range []string{"daemon", "controller"} {
		if !slices.ContainsFunc(ws, func(w workload) bool { return w.mode == mode }) {
			kind := map[string]string{"daemon": "DaemonSet", "controller": "Deployment"}[mode]
			t.Fatalf("the manifests define no %s (for `ferry %s`)", kind, mode)
		}
	}
	return ws
}

func container(w workload, name string) (corev1.Container, bool) {
	for _, c := range w.template.Spec.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.Container{}, false
}

func volumeNamed(w workload, name string) (corev1.Volume, bool) {
	for _, v := range w.template.Spec.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return corev1.Volume{}, false
}

// onVolume resolves an absolute path inside container c to the volume mounted
// over it and the path relative to that volume's root.
func onVolume(c corev1.Container, p string) (vol, rel string, ok bool) {
	p = path.Clean(p)
	best := -1
	for _, vm := range c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if p != mp && !strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/") {
			continue
		}
		if len(mp) > best {
			best = len(mp)
			vol = vm.Name
			rel = path.Join(vm.SubPath, strings.TrimPrefix(strings.TrimPrefix(p, mp), "/"))
		}
	}
	return vol, rel, best >= 0
}

// ---------------------------------------------------------------------------
// Flags of the ferry binary and of a container's args

// flagInfo is one flag that `ferry MODE --help` lists.
type flagInfo struct {
	typ string // "string", "duration", ...; empty for a bool flag
	def string // default, unquoted; empty when none is shown
}

var (
	helpMu    sync.Mutex
	helpFlags = map[string]map[string]flagInfo{}
)

var defaultRE = regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|[^()]*)\)\s*$`)

// ferryFlags runs `go run ../../cmd/ferry MODE --help` once per mode and
// parses the flags it lists: a line "  -pool string" starts a flag, the
// indented lines after it are its usage, ending in (default ...).
func ferryFlags(t *testing.T, mode string) map[string]flagInfo {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helpFlags[mode]; ok {
		return f
	}
	cmd := exec.Command("go", "run", ferryCmd, mode, "--help")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run %s %s --help: %v\n%s", ferryCmd, mode, err, stderr.String())
	}
	flags := map[string]flagInfo{}
	var cur string
	var usage []string
	end := func() {
		if cur == "" {
			return
		}
		f := flags[cur]
		if m := defaultRE.FindStringSubmatch(strings.Join(usage, " ")); m != nil {
			f.def = m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				f.def = s
			}
		}
		flags[cur] = f
		cur, usage = "", nil
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "  -") {
			end()
			head, rest, _ := strings.Cut(strings.TrimPrefix(line, "  -"), "\t")
			fields := strings.Fields(head)
			if len(fields) == 0 {
				continue
			}
			cur = fields[0]
			var f flagInfo
			if len(fields) > 1 {
				f.typ = fields[1]
			}
			flags[cur] = f
			usage = []string{strings.TrimSpace(rest)}
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			usage = append(usage, strings.TrimSpace(line))
			continue
		}
		end()
	}
	end()
	if len(flags) == 0 {
		t.Fatalf("go run %s %s --help lists no flags (no line starts with \"  -\"); has its output format changed?\n%s", ferryCmd, mode, stdout.String())
	}
	helpFlags[mode] = flags
	return flags
}

// flagValue is the value of --name (or -name) in args, and whether it is
// passed at all.
func flagValue(args []string, name string) (string, bool) {
	value, found := "", false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		n := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if n == a {
			continue
		}
		k, v, hasValue := strings.Cut(n, "=")
		if k != name {
			continue
		}
		found = true
		switch {
		case hasValue:
			value = v
		case i+1 < len(args):
			value = args[i+1]
		}
	}
	return value, found
}

// ferryArgv is the argument list the ferry binary gets in container c: its
// args, after the mode if the command names the binary and the mode.
func ferryArgv(c corev1.Container) ([]string, error) {
	if len(c.Command) == 0 {
		return c.Args, nil
	}
	if path.Base(c.Command[0]) != "ferry" {
		return nil, fmt.Errorf("command %q does not run the ferry binary", c.Command)
	}
	return append(slices.Clone(c.Command[1:]), c.Args...), nil
}

var envRefRE = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// checkFerryArgs checks argv (mode first) against the flags `ferry mode
// --help` lists, the way Go's flag package will parse it.
func checkFerryArgs(argv []string, mode string, accepted map[string]flagInfo, env []corev1.EnvVar) []string {
	var problems []string
	if len(argv) == 0 || argv[0] != mode {
		got := "nothing"
		if len(argv) > 0 {
			got = strconv.Quote(argv[0])
		}
		return []string{fmt.Sprintf("args start with %s, want the mode %q first", got, mode)}
	}
	names := make([]string, 0, len(accepted))
	for n := range accepted {
		names = append(names, "--"+n)
	}
	sort.Strings(names)
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			if i+1 < len(argv) {
				problems = append(problems, fmt.Sprintf("passes arguments after --: %q; `ferry %s` takes none and exits 2", argv[i+1:], mode))
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			problems = append(problems, fmt.Sprintf("passes the positional argument %q; `ferry %s` takes only flags and exits 2 (\"unexpected arguments\")", a, mode))
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		f, ok := accepted[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("passes %q, but `ferry %s --help` lists no flag -%s, so the binary exits 2 (\"flag provided but not defined\"); accepted flags: %s", a, mode, name, strings.Join(names, " ")))
			continue
		}
		if !hasValue && f.typ != "" {
			if i+1 >= len(argv) {
				problems = append(problems, fmt.Sprintf("passes %q last without a value; -%s takes a %s", a, name, f.typ))
				break
			}
			i++
			value = argv[i]
		}
		if envRefRE.MatchString(value) {
			continue
		}
		var err error
		switch f.typ {
		case "":
			if hasValue {
				_, err = strconv.ParseBool(value)
			}
		case "duration":
			_, err = time.ParseDuration(value)
		case "int", "int64":
			_, err = strconv.ParseInt(value, 0, 64)
		case "uint", "uint64":
			_, err = strconv.ParseUint(value, 0, 64)
		case "float64":
			_, err = strconv.ParseFloat(value, 64)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("passes %q: the value is not a valid %s", a, cmp.Or(f.typ, "bool")))
		}
	}
	defined := map[string]bool{}
	for _, e := range env {
		defined[e.Name] = true
	}
	for _, a := range argv {
		for _, m := range envRefRE.FindAllStringSubmatch(a, -1) {
			if !defined[m[1]] {
				problems = append(problems, fmt.Sprintf("passes %q, but the container defines no env %s, so Kubernetes passes $(%s) literally", a, m[1], m[1]))
			}
		}
	}
	return problems
}

// ---------------------------------------------------------------------------
// 1. Strict decoding

func TestEveryDocumentDecodesStrictlyIntoItsTypedObject(t *testing.T) {
	k, err := readKustomization()
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("deploy/kustomization.yaml lists no resources")
	}
	for _, r := range k.Resources {
		docs, err := readDocuments(r)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, d := range docs {
			t.Run(fmt.Sprintf("%s#%d", r, d.index), func(t *testing.T) {
				o, err := decode(d)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s decodes as %s", o, o.gvk)
			})
		}
	}
}

// ---------------------------------------------------------------------------
// 2. kustomization.yaml lists every manifest

func TestKustomizationListsEveryManifestAndEveryListedFileExists(t *testing.T) {
	k, err := readKustomization()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		clean := path.Clean(r)
		switch {
		case listed[clean]:
			t.Errorf("deploy/kustomization.yaml lists %q twice; kustomize refuses duplicate resources", r)
			continue
		case strings.Contains(r, "://") || path.IsAbs(r) || strings.HasPrefix(clean, "../"):
			t.Errorf("deploy/kustomization.yaml lists %q, which is not a file in deploy/; these checks cannot read it", r)
			continue
		}
		listed[clean] = true
		fi, err := os.Stat(filepath.Join(manifestDir, filepath.FromSlash(clean)))
		switch {
		case err != nil:
			t.Errorf("deploy/kustomization.yaml lists %q, which does not exist: %v", r, err)
		case !fi.Mode().IsRegular():
			t.Errorf("deploy/kustomization.yaml lists %q, which is not a regular file (a directory or another kustomization is not checked here)", r)
		case !strings.HasSuffix(clean, ".yaml") && !strings.HasSuffix(clean, ".yml"):
			t.Errorf("deploy/kustomization.yaml lists %q, which is not a .yaml file", r)
		}
	}
	entries, err := os.ReadDir(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml")) {
			continue
		}
		if n == "kustomization.yaml" || n == "kustomization.yml" {
			continue
		}
		if !listed[n] {
			t.Errorf("deploy/%s is not listed in deploy/kustomization.yaml resources:, so `kubectl apply -k deploy/` does not apply it; add \"  - %s\" to resources: (or delete the file)", n, n)
		}
	}
}

// ---------------------------------------------------------------------------
// 3. Least privilege

func describeRule(r role, i int) string {
	pr := r.rules[i]
	s := fmt.Sprintf("%s rule %d {apiGroups: %q, resources: %q, verbs: %q", r.object, i+1, pr.APIGroups, pr.Resources, pr.Verbs)
	if len(pr.NonResourceURLs) > 0 {
		s += fmt.Sprintf(", nonResourceURLs: %q", pr.NonResourceURLs)
	}
	return s + "}"
}

// everyRule returns a check that applies bad to each rule of a role.
func everyRule(bad func(rbacv1.PolicyRule) string) func(role) []string {
	return func(r role) []string {
		var out []string
		for i, pr := range r.rules {
			if why := bad(pr); why != "" {
				out = append(out, fmt.Sprintf("%s %s", describeRule(r, i), why))
			}
		}
		return out
	}
}

func matching(list []string, match func(string) bool) []string {
	var out []string
	for _, s := range list {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

func isWrite(verb string) bool { return !slices.Contains(readVerbs, verb) }

func TestRBACIsLeastPrivilege(t *testing.T) {
	m := mustLoad(t)
	all := func(t *testing.T) []role {
		rs := m.roles()
		if len(rs) == 0 {
			t.Fatal("the manifests define no ClusterRole or Role")
		}
		return rs
	}
	// nodeRoles are the roles bound to the DaemonSet's ServiceAccount.
	nodeRoles := func(t *testing.T) []role {
		var rs []role
		for _, w := range mustWorkloads(t, m) {
			if w.mode != "daemon" {
				continue
			}
			sa := w.template.Spec.ServiceAccountName
			got, errs := m.rolesOf(w.namespace, sa)
			for _, err := range errs {
				t.Errorf("ServiceAccount %s/%s of %s: %v", w.namespace, sa, w.object, err)
			}
			if len(got) == 0 {
				t.Fatalf("no role defined in the manifests is bound to ServiceAccount %s/%s of %s, so its rules cannot be checked", w.namespace, sa, w.object)
			}
			rs = append(rs, got...)
		}
		return rs
	}
	cases := []struct {
		name  string
		roles func(*testing.T) []role
		check func(role) []string
	}{
		{"no rule grants any verb on secrets", all, everyRule(func(pr rbacv1.PolicyRule) string {
			if s := matching(pr.Resources, func(r string) bool { return r == "secrets" || strings.HasPrefix(r, "secrets/") }); len(s) > 0 {
				return fmt.Sprintf("grants %q on %q; Ferry uses no CSI secrets, so remove them", pr.Verbs, s)
			}
			return ""
		})},
		{"no rule grants every resource with the wildcard *", all, everyRule(func(pr rbacv1.PolicyRule) string {
			if s := matching(pr.Resources, func(r string) bool { return r == "*" || strings.HasPrefix(r, "*/") }); len(s) > 0 {
				return fmt.Sprintf("uses the resource wildcard %q (which includes secrets); list the resources", s)
			}
			if slices.Contains(pr.NonResourceURLs, "*") {
				return "uses the nonResourceURLs wildcard \"*\"; list the URLs"
			}
			return ""
		})},
		{"no rule grants every verb with the wildcard *", all, everyRule(func(pr rbacv1.PolicyRule) string {
			if slices.Contains(pr.Verbs, "*") {
				return "uses the verb wildcard \"*\" (which includes escalate, bind, impersonate and every write); list the verbs"
			}
			return ""
		})},
		{"no rule grants every API group with the wildcard *", all, everyRule(func(pr rbacv1.PolicyRule) string {
			if slices.Contains(pr.APIGroups, "*") {
				return "uses the API group wildcard \"*\"; list the groups"
			}
			return ""
		})},
		{"no rule creates, updates, patches or deletes nodes or nodes/status", all, everyRule(func(pr rbacv1.PolicyRule) string {
			nodes := matching(pr.Resources, func(r string) bool { return r == "nodes" || r == "nodes/status" })
			writes := matching(pr.Verbs, func(v string) bool {
				return slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, v)
			})
			if len(nodes) > 0 && len(writes) > 0 {
				return fmt.Sprintf("grants %q on %q; nodes must stay read-only (get, list, watch)", writes, nodes)
			}
			return ""
		})},
		{"no ClusterRole aggregates rules from other roles", all, func(r role) []string {
			if r.aggregated {
				return []string{fmt.Sprintf("%s has an aggregationRule: its rules come from other ClusterRoles at run time and cannot be checked here; list them", r.object)}
			}
			return nil
		}},
		{"the node service account writes nothing but events", nodeRoles, everyRule(func(pr rbacv1.PolicyRule) string {
			writes := matching(pr.Verbs, isWrite)
			others := matching(pr.Resources, func(r string) bool { return r != "events" })
			if len(writes) > 0 && (len(others) > 0 || len(pr.NonResourceURLs) > 0) {
				return fmt.Sprintf("grants the write verbs %q on %q; the node plugin may only read (get, list, watch), except to create/patch events", writes, slices.Concat(others, pr.NonResourceURLs))
			}
			return ""
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range c.roles(t) {
				for _, p := range c.check(r) {
					t.Error(p)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 4. Consistency

func TestTheDaemonSetAndTheDeploymentRunAsAServiceAccountThatIsDefinedAndBound(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		t.Run(w.gvk.Kind+" "+w.name(), func(t *testing.T) {
			sa := w.template.Spec.ServiceAccountName
			if sa == "" {
				t.Fatalf("%s sets no spec.template.spec.serviceAccountName, so it runs as %s/default, which no role is meant for", w.object, w.namespace)
			}
			var defined []string
			found := false
			for _, s := range typed[*corev1.ServiceAccount](m) {
				o := m.where(s)
				defined = append(defined, m.namespaceOf(o)+"/"+s.Name)
				if s.Name == sa && m.namespaceOf(o) == w.namespace {
					found = true
				}
			}
			if !found {
				t.Errorf("%s runs as ServiceAccount %s/%s, which the manifests do not define (they define %q)", w.object, w.namespace, sa, defined)
			}
			roles, errs := m.rolesOf(w.namespace, sa)
			for _, err := range errs {
				t.Errorf("ServiceAccount %s/%s of %s is bound by %v", w.namespace, sa, w.object, err)
			}
			if len(roles) == 0 {
				t.Errorf("no ClusterRoleBinding or RoleBinding binds ServiceAccount %s/%s (of %s) to a role defined in the manifests", w.namespace, sa, w.object)
			}
			for _, r := range roles {
				t.Logf("ServiceAccount %s/%s is bound to %s", w.namespace, sa, r.object)
			}
		})
	}
}

func TestEveryRoleBindingRefersToARoleDefinedInTheManifests(t *testing.T) {
	m := mustLoad(t)
	for _, b := range m.bindings() {
		if _, err := m.boundRole(b); err != nil {
			t.Error(err)
		}
	}
}

func TestEveryWorkloadSelectorMatchesItsPodTemplateLabels(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.selector == nil {
			t.Errorf("%s has no spec.selector", w.object)
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		switch {
		case err != nil:
			t.Errorf("%s: spec.selector is invalid: %v", w.object, err)
		case sel.Empty():
			t.Errorf("%s: spec.selector is empty and would select every pod in %s", w.object, w.namespace)
		case !sel.Matches(labels.Set(w.template.Labels)):
			t.Errorf("%s: spec.selector %q does not match the pod template labels %q, so the API server rejects it (selector does not match template labels)", w.object, sel.String(), labels.Set(w.template.Labels).String())
		}
	}
}

func TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		t.Run(w.gvk.Kind+" "+w.name(), func(t *testing.T) {
			c, ok := container(w, "ferry")
			if !ok {
				t.Fatalf("%s has no container named ferry", w.object)
			}
			argv, err := ferryArgv(c)
			if err != nil {
				t.Fatalf("%s container ferry: %v", w.object, err)
			}
			for _, p := range checkFerryArgs(argv, w.mode, ferryFlags(t, w.mode), c.Env) {
				t.Errorf("%s container ferry %s", w.object, p)
			}
		})
	}
}

func TestTheDriverNameIsTheSameEverywhere(t *testing.T) {
	m := mustLoad(t)
	drivers := typed[*storagev1.CSIDriver](m)
	if len(drivers) != 1 {
		t.Fatalf("the manifests define %d CSIDrivers, want exactly 1 (%s)", len(drivers), driverName)
	}
	name := drivers[0].Name
	if name != driverName {
		t.Errorf("%s is named %q, want %q", m.where(drivers[0]), name, driverName)
	}
	classes := typed[*storagev1.StorageClass](m)
	if len(classes) == 0 {
		t.Error("the manifests define no StorageClass")
	}
	for _, sc := range classes {
		if sc.Provisioner != name {
			t.Errorf("%s has provisioner %q, but the CSIDriver is %q, so no Ferry provisioner serves it", m.where(sc), sc.Provisioner, name)
		}
	}
	var snapshotClasses int
	for _, o := range m.objects {
		if o.vsc == nil {
			continue
		}
		snapshotClasses++
		if o.vsc.Driver != name {
			t.Errorf("%s has driver %q, but the CSIDriver is %q, so no Ferry snapshotter serves it", o, o.vsc.Driver, name)
		}
	}
	if snapshotClasses == 0 {
		t.Error("the manifests define no VolumeSnapshotClass")
	}
	// The binary serves the name it is given with --driver-name, or its
	// default.
	for _, w := range mustWorkloads(t, m) {
		c, ok := container(w, "ferry")
		if !ok {
			continue // reported by TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		served, passed := flagValue(argv, "driver-name")
		if !passed {
			served = ferryFlags(t, w.mode)["driver-name"].def
		}
		if served != name {
			t.Errorf("%s container ferry serves the driver name %q (--driver-name), but the CSIDriver is %q", w.object, served, name)
		}
	}
}

func TestTheStorageClassSetsOnlyParametersTheDriverAllows(t *testing.T) {
	m := mustLoad(t)
	for _, sc := range typed[*storagev1.StorageClass](m) {
		o := m.where(sc)
		keys := make([]string, 0, len(sc.Parameters))
		for k := range sc.Parameters {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(allowedStorageClassParameters, k) {
				t.Errorf("%s sets parameters.%s, which is not a Ferry StorageClass parameter (allowed: %s)", o, k, strings.Join(allowedStorageClassParameters, ", "))
			}
		}
		if _, err := volume.ParseParams(sc.Parameters); err != nil {
			t.Errorf("%s: the driver refuses its parameters: volume.ParseParams: %v", o, err)
		}
	}
}

// ---------------------------------------------------------------------------
// 5. The socket kubelet is told about is the one the node plugin serves

func TestTheKubeletRegistrationPathIsInThePluginDirHostPath(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		if w.mode != "daemon" {
			continue
		}
		reg, ok := container(w, "node-driver-registrar")
		if !ok {
			t.Errorf("%s has no node-driver-registrar container, so kubelet never learns of the driver", w.object)
			continue
		}
		regPath, ok := flagValue(reg.Args, "kubelet-registration-path")
		if !ok || !path.IsAbs(regPath) {
			t.Errorf("%s container node-driver-registrar passes no absolute --kubelet-registration-path (args %q)", w.object, reg.Args)
			continue
		}
		v, ok := volumeNamed(w, "plugin-dir")
		if !ok || v.HostPath == nil {
			t.Errorf("%s has no hostPath volume named plugin-dir", w.object)
			continue
		}
		hostDir := path.Clean(v.HostPath.Path)
		if dir := path.Dir(path.Clean(regPath)); dir != hostDir {
			t.Errorf("%s: node-driver-registrar --kubelet-registration-path=%s names a socket in %s, but the plugin-dir volume is hostPath %s; kubelet would dial a socket nobody serves. Make them the same directory", w.object, regPath, dir, hostDir)
		}
		// And the socket the ferry container serves is that file.
		c, ok := container(w, "ferry")
		if !ok {
			continue
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		sock, err := ferryEndpoint(t, w, argv)
		if err != nil {
			t.Error(err)
			continue
		}
		vol, rel, ok := onVolume(c, sock)
		if !ok || vol != "plugin-dir" {
			t.Errorf("%s: container ferry serves %s, which is not on the plugin-dir volume (it is on %q)", w.object, sock, vol)
			continue
		}
		if onHost := path.Join(hostDir, rel); onHost != path.Clean(regPath) {
			t.Errorf("%s: container ferry serves %s, which is %s on the host, but node-driver-registrar --kubelet-registration-path=%s", w.object, sock, onHost, regPath)
		}
	}
}

// ferryEndpoint is the path of the unix socket the ferry container serves.
func ferryEndpoint(t *testing.T, w workload, argv []string) (string, error) {
	endpoint, ok := flagValue(argv, "csi-endpoint")
	if !ok {
		endpoint = ferryFlags(t, w.mode)["csi-endpoint"].def
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" || !path.IsAbs(u.Path) {
		return "", fmt.Errorf("%s container ferry: --csi-endpoint=%s is not unix:///absolute/path", w.object, endpoint)
	}
	return u.Path, nil
}

func TestEverySidecarDialsTheSocketTheFerryContainerServes(t *testing.T) {
	m := mustLoad(t)
	for _, w := range mustWorkloads(t, m) {
		c, ok := container(w, "ferry")
		if !ok {
			continue // reported by TestTheFerryContainerRunsItsModeWithOnlyFlagsTheBinaryAccepts
		}
		argv, err := ferryArgv(c)
		if err != nil {
			continue
		}
		sock, err := ferryEndpoint(t, w, argv)
		if err != nil {
			t.Error(err)
			continue
		}
		vol, rel, ok := onVolume(c, sock)
		if !ok {
			t.Errorf("%s: container ferry serves %s on no volume, so no sidecar can reach it", w.object, sock)
			continue
		}
		sidecars := 0
		for _, s := range w.template.Spec.Containers {
			addr, ok := flagValue(s.Args, "csi-address")
			if s.Name == "ferry" || !ok {
				continue
			}
			sidecars++
			addr = strings.TrimPrefix(addr, "unix://")
			svol, srel, ok := onVolume(s, addr)
			if !ok || svol != vol || srel != rel {
				t.Errorf("%s: container %s dials --csi-address=%s (volume %q, path %q), but container ferry serves %s (volume %q, path %q)", w.object, s.Name, addr, svol, srel, sock, vol, rel)
			}
		}
		if sidecars == 0 {
			t.Errorf("%s: no sidecar container passes --csi-address", w.object)
		}
	}
}
