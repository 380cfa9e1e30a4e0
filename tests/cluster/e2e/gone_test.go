//go:build cluster

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A node gone for good (README: Replace a node): one of a stopped claim's
// two copies is on a node that is killed and whose Node object an
// operator deletes. Its entry is retired (CopyRetired), the volume's
// ReplicaSet makes a new copy on the third node until the volume has its
// two copies again, and the claim's pod runs with its data. The node
// then comes back (registered anew): its old copy is not listed again,
// and it is not destroyed (no deletion mark says so).
func TestAReplicatedClaimOutlivesANodeGoneForGood(t *testing.T) {
	s := writeAndStop(t, "gone")
	var lost, kept, third string
	for _, n := range strings.Fields(must(t, "", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		_, held := s.copies[n]
		switch {
		case held && lost == "":
			lost = n
		case held:
			kept = n
		default:
			third = n
		}
	}
	if lost == "" || kept == "" || third == "" {
		t.Fatalf("copies on %v: a third node without one is needed", s.copies)
	}
	lostGUID := s.copies[lost]
	restored := false
	t.Cleanup(func() {
		if !restored {
			nodeFault(t, "restore", lost)
		}
	})
	nodeFault(t, "kill", lost)
	must(t, "", "delete", "node", lost, "--wait=true")
	eventually(t, "the gone node's copy retired and a new copy on "+third+" holding the last write", 300*time.Second, func() (bool, string) {
		rv, err := getRV(t, s.vol)
		if err != nil {
			return false, err.Error()
		}
		var nodes []string
		for _, r := range rv.Status.Replicas {
			nodes = append(nodes, r.Node)
		}
		slices.Sort(nodes)
		want := []string{kept, third}
		slices.Sort(want)
		if !slices.Equal(nodes, want) || rv.Status.ReadyReplicas != 2 {
			return false, fmt.Sprintf("replicas %v ready %d, want %v ready", nodes, rv.Status.ReadyReplicas, want)
		}
		if got := hostChecksum(t, third, s.vol, "last"); got != s.last {
			return false, fmt.Sprintf("%s's copy reads %s, want %s", third, got, s.last)
		}
		return true, ""
	})
	if ev := volumeEvents(t, s.vol); !strings.Contains(ev, "CopyRetired") || !strings.Contains(ev, lost) {
		t.Fatalf("no CopyRetired event naming %s: %s", lost, ev)
	}
	// The pod runs on a copy's node with its data.
	delete(s.copies, lost)
	s.copies[third] = datasetGUID(t, third, s.vol)
	pod := s.restart(t, "on the copies left")
	writeRandom(t, s.ns, pod, "after", 16)
	waitReady(t, s.vol)

	// The node comes back: registered anew, its daemon running again.
	nodeFault(t, "restore", lost)
	restored = true
	eventually(t, "the node daemon runs again on "+lost, 180*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", "ferry-system", "get", "pods", "--field-selector", "spec.nodeName="+lost, "-l", "app.kubernetes.io/name=ferry,app.kubernetes.io/component=node",
			"-o", `jsonpath={range .items[*]}{.status.containerStatuses[*].ready}{"\n"}{end}`)
		return strings.Contains(out, "true") && !strings.Contains(out, "false"), out
	})
	waitReady(t, s.vol)
	rv, err := getRV(t, s.vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rv.Status.Replicas {
		if r.Node == lost {
			t.Fatalf("the retired copy on %s is listed again: %+v", lost, rv.Status.Replicas)
		}
	}
	if !datasetExists(t, lost, s.vol) || datasetGUID(t, lost, s.vol) != lostGUID {
		t.Fatalf("the copy on %s, retired but never deleted by a user, was destroyed", lost)
	}
}
