package deploy_test

import (
	"fmt"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		mode := "controller"
		if !slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "ferry" }) {
			mode = "" // another component (snapshot-controller): no ferry mode to check
		}
		out = append(out, workload{object: o, namespace: m.namespaceOf(o), mode: mode, selector: d.Spec.Selector, template: d.Spec.Template})
	}
	return out
}

// mustWorkloads returns the workloads, failing unless there is the node
// DaemonSet (Ferry runs on every node; its controller service too).
func mustWorkloads(t *testing.T, m *manifests) []workload {
	t.Helper()
	ws := m.workloads()
	for _, mode := range []string{"daemon"} {
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

// hasNodeLabelPolicy: the manifests hold the ValidatingAdmissionPolicy
// ferry-node-labels and a binding of it that denies.
func (m *manifests) hasNodeLabelPolicy() bool {
	policy, bound := false, false
	for _, o := range m.objects {
		switch v := o.obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			policy = policy || v.Name == "ferry-node-labels"
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			bound = bound || (v.Spec.PolicyName == "ferry-node-labels" && slices.Contains(v.Spec.ValidationActions, admissionv1.Deny))
		}
	}
	return policy && bound
}

// hasServiceAccount reports whether the manifests define the ServiceAccount
// name in their namespace.
func (m *manifests) hasServiceAccount(name string) bool {
	for _, o := range m.objects {
		if o.gvk.Kind == "ServiceAccount" && o.name() == name && (o.meta.GetNamespace() == "" || o.meta.GetNamespace() == m.namespace) {
			return true
		}
	}
	return false
}
