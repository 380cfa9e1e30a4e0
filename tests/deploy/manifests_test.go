package deploy_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// ---------------------------------------------------------------------------
// Loading

// kustomization is the part of a kustomization.yaml these checks read.
type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
}

// kustomizations are the directories of deploy/ a user applies: the CRD
// and its policies (crds, first), then the driver ("").
var kustomizations = []string{"crds", ""}

// readKustomization reads deploy/<dir>/kustomization.yaml.
func readKustomization(dir string) (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(manifestDir, dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return k, fmt.Errorf("%s: %w", path.Join("deploy", dir, "kustomization.yaml"), err)
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
		loaded = &manifests{}
		for _, dir := range kustomizations {
			k, err := readKustomization(dir)
			if err != nil {
				loadErrors = append(loadErrors, err.Error())
				return
			}
			if dir == "" {
				loaded.namespace = k.Namespace
			}
			loaded.load(dir, k)
		}
	})
	return loaded, loadErrors
}

// load decodes every document of the resources of deploy/<dir>'s
// kustomization.
func (m *manifests) load(dir string, k kustomization) {
	{
		for _, r := range k.Resources {
			docs, err := readDocuments(path.Join(dir, r))
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
				m.objects = append(m.objects, o)
			}
		}
	}
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
		return nil, fmt.Errorf("deploy/%s (listed in a kustomization.yaml of deploy/): %w", resource, err)
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
// 1. Strict decoding

func TestEveryDocumentDecodesStrictlyIntoItsTypedObject(t *testing.T) {
	for _, dir := range kustomizations {
		k, err := readKustomization(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(k.Resources) == 0 {
			t.Fatalf("%s lists no resources", path.Join("deploy", dir, "kustomization.yaml"))
		}
		for _, r := range k.Resources {
			r = path.Join(dir, r)
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
}

// ---------------------------------------------------------------------------
// 2. kustomization.yaml lists every manifest

func TestKustomizationListsEveryManifestAndEveryListedFileExists(t *testing.T) {
	for _, dir := range kustomizations {
		kustomizationListsEveryManifest(t, dir)
	}
}

func kustomizationListsEveryManifest(t *testing.T, dir string) {
	k, err := readKustomization(dir)
	if err != nil {
		t.Fatal(err)
	}
	where := path.Join("deploy", dir, "kustomization.yaml")
	listed := map[string]bool{}
	for _, r := range k.Resources {
		clean := path.Clean(r)
		switch {
		case listed[clean]:
			t.Errorf("%s lists %q twice; kustomize refuses duplicate resources", where, r)
			continue
		case strings.Contains(r, "://") || path.IsAbs(r) || strings.HasPrefix(clean, "../"):
			t.Errorf("%s lists %q, which is not a file in its directory; these checks cannot read it", where, r)
			continue
		}
		listed[clean] = true
		fi, err := os.Stat(filepath.Join(manifestDir, dir, filepath.FromSlash(clean)))
		switch {
		case err != nil:
			t.Errorf("%s lists %q, which does not exist: %v", where, r, err)
		case !fi.Mode().IsRegular():
			t.Errorf("%s lists %q, which is not a regular file (a directory or another kustomization is not checked here)", where, r)
		case !strings.HasSuffix(clean, ".yaml") && !strings.HasSuffix(clean, ".yml"):
			t.Errorf("%s lists %q, which is not a .yaml file", where, r)
		}
	}
	entries, err := os.ReadDir(filepath.Join(manifestDir, dir))
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
			t.Errorf("%s is not listed in %s resources:, so `kubectl apply -k %s` does not apply it; add \"  - %s\" to resources: (or delete the file)",
				path.Join("deploy", dir, n), where, path.Join("deploy", dir)+"/", n)
		}
	}
}
