//go:build cluster

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Uninstalling the driver (kubectl delete -k deploy/, the README's
// Uninstall step 1) destroys no copy and keeps every ReplicatedVolume
// (deploy/crds stays); installing it again brings the volume back with
// its data, from the same copies (no transfer). It deletes and re-creates
// the driver: make e2e-uninstall runs it alone, last.
func TestUninstallingTheDriverAndInstallingItAgainBringsBackEveryVolume(t *testing.T) {
	s := writeAndStop(t, "keep")
	start := time.Now()
	must(t, "", "delete", "-k", "../../../deploy", "--ignore-not-found", "--wait=true", "--timeout=300s")
	driverNamespaceGone(t)
	t.Logf("driver uninstalled in %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := getRV(t, s.vol); err != nil {
		t.Fatalf("the uninstall took the ReplicatedVolume: %v", err)
	}
	s.copiesKept(t, "by the uninstall")

	cmd := exec.Command("../deploy.sh")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("installing the driver again: %v", err)
	}
	s.restart(t, "after the reinstall")
	waitReady(t, s.vol)
	s.copiesKept(t, "after the reinstall (received again?)")
}

// The driver moved from the kustomize deployment to the Helm chart and
// back, keeping every volume: the chart adopts the admission policies
// deploy/crds made (--take-ownership, as a user moving over would),
// installs with its own peer PKI, and the volume comes back
// with its data from the same copies; an upgrade keeps the CA; `helm
// uninstall` keeps every copy, the ReplicatedVolume, the policies guarding
// them and the peer PKI, and the namespace's deletion every copy; the
// kustomize deployment then takes over again.
// The chart's objects get the test cluster's differences through the
// post-renderer tests/cluster/helm-plugins/ferry-test-overlay.
func TestUninstallingTheKustomizeDeploymentAndInstallingThroughTheHelmChartKeepsEveryVolume(t *testing.T) {
	helm := envOr("HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm (make helm builds it): %v", err)
	}
	plugins, err := filepath.Abs("../helm-plugins")
	if err != nil {
		t.Fatal(err)
	}
	runHelm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = "../../.."
		cmd.Env = append(os.Environ(), "HELM_PLUGINS="+plugins, "KUBECTL="+kubectlBin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	driverRegistered := func(when string) {
		t.Helper()
		for _, n := range strings.Fields(must(t, "", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
			eventually(t, "the kubelet of "+n+" registered the driver "+when, 180*time.Second, func() (bool, string) {
				out, _ := kubectl(t, "", "get", "csinode", n, "-o", "jsonpath={.spec.drivers[*].name}")
				return strings.Contains(out, "ferry.zfs.csi.io"), out
			})
		}
	}
	caOf := func() string {
		return must(t, "", "-n", "ferry-system", "get", "secret", "ferry-peer-ca", "-o", "jsonpath={.data.tls\\.crt}")
	}

	s := writeAndStop(t, "helm")
	stop := func(when string) {
		t.Helper()
		must(t, "", "-n", s.ns, "scale", "statefulset", s.app, "--replicas=0")
		eventually(t, "the volume has no active primary "+when, 120*time.Second, func() (bool, string) {
			rv, err := getRV(t, s.vol)
			return err == nil && activeCount(rv) == 0, fmt.Sprintf("%+v %v", rv.Status, err)
		})
	}
	must(t, "", "delete", "-k", "../../../deploy", "--ignore-not-found", "--wait=true", "--timeout=300s")
	driverNamespaceGone(t)
	// The policies deploy/crds made become the release's, as a user
	// moving over would do it: --take-ownership, and --force-conflicts
	// since kubectl applied them (Helm 4 applies server-side).
	start := time.Now()
	runHelm("install", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--create-namespace",
		"--set", "storageClass.create=false", "--post-renderer", "ferry-test-overlay", "--take-ownership", "--force-conflicts",
		"--wait", "--timeout", "5m")
	driverRegistered("after helm install")
	t.Logf("installed through the chart in %s", time.Since(start).Round(100*time.Millisecond))
	ca := caOf()
	if ca == "" {
		t.Fatal("the chart made no peer CA")
	}
	s.restart(t, "after helm install")
	waitReady(t, s.vol)
	s.copiesKept(t, "after helm install (received again?)")

	runHelm("upgrade", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--reuse-values",
		"--post-renderer", "ferry-test-overlay", "--wait", "--timeout", "5m")
	if caOf() != ca {
		t.Fatal("helm upgrade made a new peer CA: the nodes' certificates no longer verify")
	}
	stop("before helm uninstall")
	runHelm("uninstall", "ferry", "--namespace", "ferry-system", "--wait", "--timeout", "5m")
	eventually(t, "the chart's DaemonSet is gone", 180*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	})
	if _, err := getRV(t, s.vol); err != nil {
		t.Fatalf("helm uninstall took the ReplicatedVolume: %v", err)
	}
	s.copiesKept(t, "by helm uninstall")
	if caOf() != ca {
		t.Fatal("helm uninstall did not keep the peer CA")
	}
	if _, err := kubectl(t, "", "get", "validatingadmissionpolicy", "ferry-crd-guard"); err != nil {
		t.Fatalf("helm uninstall took the policy guarding the CRD: %v", err)
	}
	// The volume managers Ferry started in the namespace are not the
	// release's: they outlive `helm uninstall`, with the tokens of service
	// accounts it deleted (a reinstall makes new ones, which those tokens
	// are not). The uninstall ends with the namespace, as the chart's
	// README says; every copy stays.
	must(t, "", "delete", "namespace", "ferry-system", "--wait=true", "--timeout=300s")
	driverNamespaceGone(t)
	s.copiesKept(t, "by the namespace's deletion")

	// The kustomize deployment again (the later stages' driver).
	cmd := exec.Command("../deploy.sh")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("installing the kustomize deployment again: %v", err)
	}
	s.restart(t, "after the kustomize deployment came back")
	waitReady(t, s.vol)
	s.copiesKept(t, "after the kustomize deployment came back (received again?)")
}

// driverNamespaceGone waits until ferry-system is deleted.
func driverNamespaceGone(t *testing.T) {
	t.Helper()
	eventually(t, "the driver's namespace is gone", 300*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "get", "namespace", "ferry-system")
		return err != nil && strings.Contains(err.Error(), "NotFound"), out
	})
}
