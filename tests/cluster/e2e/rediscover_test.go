//go:build cluster

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A ReplicatedVolume lost while its copies remain (deleted as Ferry's
// daemon, its finalizer removed by hand): no copy is destroyed, the
// daemons rebuild the state from the copies (every node answering what it
// holds), and the claim's pod runs again with its data, from the same
// copies.
func TestALostReplicatedVolumeIsRebuiltFromItsCopies(t *testing.T) {
	s := writeAndStop(t, "lost")
	// Lost: deleted (as the daemon, the one identity the policy lets),
	// without Ferry's mark, and its finalizer removed by an administrator.
	must(t, "", "--as=system:serviceaccount:ferry-system:ferry-node", "delete", "rv", s.vol, "--wait=false")
	must(t, "", "patch", "rv", s.vol, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	eventually(t, "the state is rebuilt from the copies, both answering", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, s.vol)
		if err != nil {
			return false, err.Error()
		}
		out, _ := kubectl(t, "", "get", "rv", s.vol, "-o", "jsonpath={.status.awaiting}")
		return len(rv.Status.Replicas) == 2 && strings.TrimSpace(out) == "" && rv.Status.Epoch > s.epoch, fmt.Sprintf("%+v awaiting %q", rv.Status, out)
	})
	s.copiesKept(t, "while its state was lost")
	pod := s.restart(t, "after the rebuild")
	writeRandom(t, s.ns, pod, "after", 16)
	waitReady(t, s.vol)
}
