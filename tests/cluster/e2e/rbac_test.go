//go:build cluster

package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// The table of what each of Ferry's ServiceAccounts may and may not do,
// asked of the real API server (kubectl auth can-i --as): what each needs,
// nothing more. The node writes below are narrowed further by the
// admission policy (tests/kubeapi checks it case by case).
func TestEachServiceAccountMayDoWhatItNeedsAndNothingMore(t *testing.T) {
	type ask struct {
		verb, resource, ns string
		want               bool
	}
	table := map[string][]ask{
		"ferry-node": {
			{"create", "persistentvolumes", "", true},
			{"patch", "nodes", "", true},
			{"create", "replicatedvolumes.ferry.zfs.csi.io", "", true},
			{"update", "replicatedvolumes.ferry.zfs.csi.io/status", "", true},
			{"delete", "replicatedvolumes.ferry.zfs.csi.io", "", true},
			{"patch", "replicatedvolumes.ferry.zfs.csi.io", "", true}, // only the finalizer: admission-replicatedvolumes.yaml
			{"create", "replicasets.apps", "ferry-system", true},
			{"create", "poddisruptionbudgets.policy", "ferry-system", true},
			{"create", "pods", "ferry-system", true},
			// Its replica pod out of the ReplicaSet for a publish and back.
			{"patch", "pods", "ferry-system", true},
			{"patch", "pods", "default", false},
			{"update", "leases.coordination.k8s.io", "ferry-system", true},
			// Events on ReplicatedVolumes (cluster-scoped: in default) and
			// on claims, whose UID the recorder reads.
			{"create", "events", "default", true},
			{"get", "persistentvolumeclaims", "default", true},
			{"get", "secrets", "ferry-system", false},
			{"list", "secrets", "", false},
			{"delete", "nodes", "", false},
			{"update", "nodes/status", "", false},
			// A lost node's pods of a volume taken over are force-deleted
			// (app/failover); pods are never created or patched outside
			// Ferry's namespace.
			{"delete", "pods", "default", true},
			{"delete", "replicasets.apps", "ferry-system", false},
			{"update", "leases.coordination.k8s.io", "kube-system", false},
			{"create", "pods", "default", false},
			{"create", "replicasets.apps", "default", false},
			{"escalate", "clusterroles.rbac.authorization.k8s.io", "", false},
			{"impersonate", "serviceaccounts", "", false},
		},
		"ferry-replica": {
			{"get", "replicatedvolumes.ferry.zfs.csi.io", "", true},
			{"update", "replicatedvolumes.ferry.zfs.csi.io/status", "", true},
			{"get", "leases.coordination.k8s.io", "ferry-system", true},
			{"create", "events", "ferry-system", true},
			{"create", "events", "default", true}, // a ReplicatedVolume's events
			// Its events go on the claim too, whose UID the recorder reads.
			{"get", "persistentvolumeclaims", "default", true},
			{"list", "persistentvolumeclaims", "default", false},
			{"update", "persistentvolumeclaims", "default", false},
			{"patch", "replicatedvolumes.ferry.zfs.csi.io", "", true}, // only the finalizer: admission-replicatedvolumes.yaml
			{"update", "replicatedvolumes.ferry.zfs.csi.io", "", false},
			{"delete", "replicatedvolumes.ferry.zfs.csi.io", "", false},
			{"update", "leases.coordination.k8s.io", "ferry-system", false},
			{"get", "secrets", "ferry-system", false},
			{"create", "pods", "ferry-system", false},
			{"patch", "nodes", "", false},
			{"create", "persistentvolumes", "", false},
		},
	}
	var rows []string
	for sa, asks := range table {
		for _, a := range asks {
			res, sub, _ := strings.Cut(a.resource, "/")
			args := []string{"auth", "can-i", a.verb, res, "--as", "system:serviceaccount:ferry-system:" + sa}
			if sub != "" {
				args = append(args, "--subresource", sub)
			}
			if a.ns != "" {
				args = append(args, "-n", a.ns)
			}
			out, _ := kubectl(t, "", args...) // exit 1 means "no"
			got := strings.TrimSpace(out) == "yes"
			rows = append(rows, fmt.Sprintf("%-14s %-10s %-45s %-13s %v", sa, a.verb, a.resource, a.ns, got))
			if got != a.want {
				t.Errorf("%s may %s %s (namespace %q): %v, want %v", sa, a.verb, a.resource, a.ns, got, a.want)
			}
		}
	}
	t.Logf("kubectl auth can-i:\n%s", strings.Join(rows, "\n"))
}
