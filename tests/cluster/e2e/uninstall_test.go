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

// The two tests below delete and re-create the driver: make e2e-uninstall
// runs them alone, last but for node loss, in this order. The cluster is
// installed through the Helm chart (make cluster-deploy); the first moves
// it to the kustomize deployment, the second back to the chart, which the
// later stages then run on.

// The driver installed through the Helm chart: `helm upgrade` keeps the
// peer CA; the quickstart's uninstall (`helm uninstall`, the namespace's
// deletion) keeps every copy, the ReplicatedVolume and the policies
// guarding them; the kustomize deployment then takes over and the volume
// comes back with its data from the same copies (no transfer). The
// chart's objects get the test cluster's differences through the
// post-renderer tests/cluster/helm-plugins/ferry-test-overlay.
func TestUninstallingTheHelmReleaseAndInstallingTheKustomizeDeploymentKeepsEveryVolume(t *testing.T) {
	runHelm := helmRunner(t)
	if _, err := runHelm(false, "status", "ferry", "--namespace", "ferry-system"); err != nil {
		t.Log("no Helm release: installing the driver through the chart first")
		deploy(t, "helm")
	}
	caOf := func() string {
		return must(t, "", "-n", "ferry-system", "get", "secret", "ferry-peer-ca", "-o", "jsonpath={.data.tls\\.crt}")
	}
	ca := caOf()
	if ca == "" {
		t.Fatal("the chart made no peer CA")
	}
	s := writeAndStop(t, "helm")
	s.restart(t, "before helm upgrade")
	waitReady(t, s.vol)

	// --force-conflicts: make e2e-upgrade, before, applied its releases'
	// manifests over the release with kubectl, whose field manager then
	// holds fields the chart sets (as after a user's kubectl edit).
	runHelm(true, "upgrade", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--reuse-values",
		"--post-renderer", "ferry-test-overlay", "--force-conflicts", "--wait", "--timeout", "5m")
	if caOf() != ca {
		t.Fatal("helm upgrade made a new peer CA: the nodes' certificates no longer verify")
	}
	s.copiesKept(t, "by helm upgrade")
	s.stop(t, "before helm uninstall")
	// The quickstart's uninstall (docs/quickstart.md, step 6): `helm
	// uninstall` and the namespace's deletion (the volume managers Ferry
	// started there are not the release's: they would outlive the
	// service accounts it deleted, with their tokens).
	start := time.Now()
	quickstart(t, "", "uninstall")
	driverNamespaceGone(t)
	t.Logf("the quickstart's uninstall took %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := getRV(t, s.vol); err != nil {
		t.Fatalf("the uninstall took the ReplicatedVolume: %v", err)
	}
	s.copiesKept(t, "by the uninstall")
	if _, err := kubectl(t, "", "get", "validatingadmissionpolicy", "ferry-crd-guard"); err != nil {
		t.Fatalf("the uninstall took the policy guarding the CRD: %v", err)
	}

	deploy(t, "kustomize")
	s.restart(t, "after the kustomize deployment took over")
	waitReady(t, s.vol)
	s.copiesKept(t, "after the kustomize deployment took over (received again?)")
}

// Uninstalling the kustomize deployment (kubectl delete -k deploy/, the
// README's Uninstall step 1) destroys no copy and keeps every
// ReplicatedVolume (deploy/crds stays); installing the driver again,
// through the chart as a user moving over would (the policies deploy/crds
// made become the release's: --take-ownership), brings the volume back
// with its data, from the same copies (no transfer).
func TestUninstallingTheKustomizeDeploymentAndInstallingThroughTheHelmChartKeepsEveryVolume(t *testing.T) {
	s := writeAndStop(t, "keep")
	start := time.Now()
	must(t, "", "delete", "-k", "../../../deploy", "--ignore-not-found", "--wait=true", "--timeout=300s")
	driverNamespaceGone(t)
	t.Logf("driver uninstalled in %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := getRV(t, s.vol); err != nil {
		t.Fatalf("the uninstall took the ReplicatedVolume: %v", err)
	}
	s.copiesKept(t, "by the uninstall")

	start = time.Now()
	deploy(t, "helm")
	t.Logf("installed through the chart in %s", time.Since(start).Round(100*time.Millisecond))
	if out, err := helmRunner(t)(false, "status", "ferry", "--namespace", "ferry-system"); err != nil || !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm status after the install: %v\n%s", err, out)
	}
	s.restart(t, "after the install through the chart")
	waitReady(t, s.vol)
	s.copiesKept(t, "after the install through the chart (received again?)")
}

// helmRunner runs helm on the cluster from the repository's root, with the
// test overlay's post-renderer plugin; with must set a failure fails the
// test.
func helmRunner(t *testing.T) func(must bool, args ...string) (string, error) {
	helm := envOr("HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm (make helm builds it): %v", err)
	}
	plugins, err := filepath.Abs("../helm-plugins")
	if err != nil {
		t.Fatal(err)
	}
	return func(must bool, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Dir = "../../.."
		cmd.Env = append(os.Environ(), "HELM_PLUGINS="+plugins, "KUBECTL="+kubectlBin)
		out, err := cmd.CombinedOutput()
		if err != nil && must {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), err
	}
}

// deploy installs the driver with tests/cluster/deploy.sh, through the
// chart (how "helm") or the kustomize overlay ("kustomize").
func deploy(t *testing.T, how string) {
	t.Helper()
	cmd := exec.Command("../deploy.sh")
	cmd.Env = append(os.Environ(), "FERRY_DEPLOY="+how, "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("installing the driver (%s): %v", how, err)
	}
}

// quickstart runs the quickstart's block name (docs/quickstart.md) on the
// cluster through tests/cluster/quickstart.sh, its kubectl calls that name
// no namespace in ns ("": none), and returns what it printed.
func quickstart(t *testing.T, ns, name string) string {
	t.Helper()
	cmd := exec.Command("../quickstart.sh", "run", name)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "QUICKSTART_NAMESPACE="+ns)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quickstart's %s: %v\n%s", name, err, out)
	}
	return string(out)
}

// driverNamespaceGone waits until ferry-system is deleted.
func driverNamespaceGone(t *testing.T) {
	t.Helper()
	eventually(t, "the driver's namespace is gone", 300*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "get", "namespace", "ferry-system")
		return err != nil && strings.Contains(err.Error(), "NotFound"), out
	})
}

// stop scales the StatefulSet to 0 and waits until the volume has no
// active primary.
func (s stopped) stop(t *testing.T, when string) {
	t.Helper()
	must(t, "", "-n", s.ns, "scale", "statefulset", s.app, "--replicas=0")
	eventually(t, "the volume has no active primary "+when, 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, s.vol)
		return err == nil && activeCount(rv) == 0, fmt.Sprintf("%+v %v", rv.Status, err)
	})
}
