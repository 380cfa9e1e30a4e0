package deploy_test

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// readVerbs are the only verbs that do not write.
var readVerbs = []string{"get", "list", "watch"}

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
		{"nodes are only patched, and only under the placement-label admission policy", all, everyRule(func(pr rbacv1.PolicyRule) string {
			nodes := matching(pr.Resources, func(r string) bool { return r == "nodes" || r == "nodes/status" })
			writes := matching(pr.Verbs, func(v string) bool {
				return slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, v)
			})
			if len(nodes) == 0 || len(writes) == 0 {
				return ""
			}
			if slices.Contains(nodes, "nodes/status") || !slices.Equal(writes, []string{"patch"}) {
				return fmt.Sprintf("grants %q on %q; nodes may only be patched (placement labels), never their status", writes, nodes)
			}
			if !m.hasNodeLabelPolicy() {
				return "grants patch on nodes without the ValidatingAdmissionPolicy ferry-node-labels (and its Deny binding) that narrows it to Ferry's placement labels"
			}
			return ""
		})},
		{"no ClusterRole aggregates rules from other roles", all, func(r role) []string {
			if r.aggregated {
				return []string{fmt.Sprintf("%s has an aggregationRule: its rules come from other ClusterRoles at run time and cannot be checked here; list them", r.object)}
			}
			return nil
		}},
		{"the node service account writes only what its sidecars must", nodeRoles, everyRule(func(pr rbacv1.PolicyRule) string {
			// What external-provisioner and csi-snapshotter (--node-deployment)
			// and csi-resizer write, and what ferry daemon writes: placement
			// labels (and a lost node's fenced taint), its node's Lease,
			// the objects of the replicated volumes it creates, and a lost
			// node's pods.
			allowed := map[string][]string{
				"events":                        {"create", "update", "patch"},
				"persistentvolumes":             {"create", "patch", "delete"},
				"persistentvolumeclaims":        {"update"},
				"persistentvolumeclaims/status": {"patch"},
				"volumesnapshotcontents":        {"update", "patch"},
				"volumesnapshotcontents/status": {"update", "patch"},
				"leases":                        {"create", "update", "patch"},
				"nodes":                         {"patch"},
				"replicatedvolumes":             {"create", "delete", "patch"},
				"replicatedvolumes/status":      {"update"},
				"replicasets":                   {"create", "patch"},
				"poddisruptionbudgets":          {"create", "patch"},
				// patch: its replica pod out of the ReplicaSet for a publish
				// and back; delete: a lost node's pods of a volume taken over
				// (grace 0, UID precondition; app/failover).
				"pods": {"create", "patch", "delete"},
				// patch: the one ConfigMap listing the nodes it fenced
				// (admission-pod-deletions.yaml reads it); create: it again
				// when deleted (in Ferry's namespace only: a Role).
				"configmaps": {"create", "patch"},
				// its peer certificate: the request to Ferry's signer
				// (approving and signing are the signer's, never the
				// node's). Never delete: it cannot be narrowed to the
				// daemon's own requests (kubelets' would be in reach);
				// kube-controller-manager's CSR cleaner removes them.
				"certificatesigningrequests": {"create"},
				// the provisioner's storage capacity objects, in Ferry's
				// namespace only (a Role: checked below).
				"csistoragecapacities": {"create", "update", "patch", "delete"},
			}
			var bad []string
			for _, r := range pr.Resources {
				for _, v := range matching(pr.Verbs, isWrite) {
					if !slices.Contains(allowed[r], v) {
						bad = append(bad, v+" "+r)
					}
				}
				if r == "configmaps" && slices.Contains(pr.Verbs, "patch") && !slices.Equal(pr.ResourceNames, []string{"ferry-fenced-nodes"}) {
					bad = append(bad, fmt.Sprintf("configmaps %q (only ferry-fenced-nodes)", pr.ResourceNames))
				}
			}
			if len(bad) > 0 || (len(pr.NonResourceURLs) > 0 && len(matching(pr.Verbs, isWrite)) > 0) {
				return fmt.Sprintf("grants %q; the node pod writes only events, the PVs and claims it provisions or resizes, snapshot contents, leases, its placement labels, its replicated volumes' objects and its peer certificate requests", bad)
			}
			return ""
		})},
	}
	cases = append(cases, struct {
		name  string
		roles func(*testing.T) []role
		check func(role) []string
	}{"the replica service account writes only its volume's status and events", func(t *testing.T) []role {
		rs, errs := m.rolesOf("ferry-system", "ferry-replica")
		for _, err := range errs {
			t.Error(err)
		}
		if len(rs) == 0 {
			t.Fatal("no role is bound to ServiceAccount ferry-system/ferry-replica (the replica pods')")
		}
		return rs
	}, everyRule(func(pr rbacv1.PolicyRule) string {
		allowed := map[string][]string{"replicatedvolumes/status": {"update"}, "replicatedvolumes": {"patch"}, "events": {"create", "patch"}}
		var bad []string
		for _, r := range pr.Resources {
			for _, v := range matching(pr.Verbs, isWrite) {
				if !slices.Contains(allowed[r], v) {
					bad = append(bad, v+" "+r)
				}
			}
		}
		if len(bad) > 0 {
			return fmt.Sprintf("grants %q; a replica pod writes only its volume's status, events, and the finalizer's removal", bad)
		}
		return ""
	})})
	cases = append(cases, struct {
		name  string
		roles func(*testing.T) []role
		check func(role) []string
	}{"storage capacity objects are written in Ferry's namespace only", all, func(r role) []string {
		var out []string
		for i, pr := range r.rules {
			if r.namespace == "" && (slices.Contains(pr.Resources, "csistoragecapacities") || slices.Contains(pr.Resources, "*")) && len(matching(pr.Verbs, isWrite)) > 0 {
				out = append(out, describeRule(r, i)+" writes CSIStorageCapacity objects cluster-wide; a Role in Ferry's namespace must do")
			}
		}
		return out
	}})
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

// The admission policies grant and restrict by the caller's name: each
// names Ferry's accounts in full, in the namespace the driver is installed
// to, so an account of the same name in another namespace (anyone who may
// create ServiceAccounts there) is never taken for Ferry's.
func TestAdmissionPoliciesNameFerrysAccountsInFerrysNamespaceOnly(t *testing.T) {
	m := mustLoad(t)
	account := regexp.MustCompile(`system:serviceaccount:[a-z0-9.-]*:?[a-z0-9.-]*`)
	seen := 0
	for _, dir := range kustomizations {
		k, err := readKustomization(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range k.Resources {
			docs, err := readDocuments(path.Join(dir, r))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range docs {
				if !strings.Contains(string(d.data), "kind: ValidatingAdmissionPolicy\n") {
					continue
				}
				text := string(d.data)
				if strings.Contains(text, "username.endsWith") || strings.Contains(text, "username.startsWith") {
					t.Errorf("%s matches a caller by a part of its name: name Ferry's accounts in full", d)
				}
				for _, a := range account.FindAllString(text, -1) {
					seen++
					parts := strings.Split(a, ":")
					if len(parts) != 4 || parts[2] != m.namespace || !m.hasServiceAccount(parts[3]) {
						t.Errorf("%s names %q: want system:serviceaccount:%s:<a ServiceAccount of the manifests>", d, a, m.namespace)
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no admission policy names Ferry's accounts")
	}
}
