//go:build cluster

package e2e

import (
	"os"
	"os/exec"
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
	eventually(t, "the driver's namespace is gone", 300*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "get", "namespace", "ferry-system")
		return err != nil && strings.Contains(err.Error(), "NotFound"), out
	})
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
