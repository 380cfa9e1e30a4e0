//go:build cluster

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// stopped is a StatefulSet's replicated claim whose pod wrote blob and
// then last, and was stopped: both copies hold the last write.
type stopped struct {
	ns, app, vol string
	blob, last   string
	copies       map[string]string // node -> its copy's guid
	epoch        int64             // the volume's epoch then
}

// writeAndStop runs the StatefulSet app with a replicated claim, writes
// and scales it to 0, and waits until both copies hold the last write.
func writeAndStop(t *testing.T, app string) stopped {
	t.Helper()
	s := stopped{ns: namespace(t), app: app, copies: map[string]string{}}
	must(t, statefulSetYAML(app), "-n", s.ns, "apply", "-f", "-")
	pod, _ := podOf(t, s.ns, app, 120*time.Second)
	s.vol = volumeOf(t, s.ns, "data-"+app+"-0")
	s.blob = writeRandom(t, s.ns, pod, "blob", 2048)
	waitReady(t, s.vol)
	s.last = writeRandom(t, s.ns, pod, "last", 64)
	must(t, "", "-n", s.ns, "scale", "statefulset", app, "--replicas=0")
	eventually(t, "with no pod, both copies hold the last write", 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, s.vol)
		if err != nil || activeCount(rv) != 0 || len(rv.Status.Replicas) != 2 {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		for _, r := range rv.Status.Replicas {
			if got := hostChecksum(t, r.Node, s.vol, "last"); got != s.last {
				return false, fmt.Sprintf("%s's last: %s, want %s", r.Node, got, s.last)
			}
			s.copies[r.Node] = datasetGUID(t, r.Node, s.vol)
		}
		s.epoch = rv.Status.Epoch
		return true, ""
	})
	return s
}

// copiesKept fails the test unless every copy is there, the same dataset.
func (s stopped) copiesKept(t *testing.T, when string) {
	t.Helper()
	for node, guid := range s.copies {
		if !datasetExists(t, node, s.vol) || datasetGUID(t, node, s.vol) != guid {
			t.Fatalf("%s's copy was destroyed or replaced %s", node, when)
		}
	}
}

// restart scales the StatefulSet back to one pod on a copy's node (the
// PV's node affinity also names the node the volume was created on, whose
// copy may have left as surplus: a pod scheduled there is refused,
// NoReplicaHere; see the stop note) and checks its data.
func (s stopped) restart(t *testing.T, when string) string {
	t.Helper()
	for _, n := range strings.Fields(must(t, "", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		if _, held := s.copies[n]; !held {
			cordon(t, n)
		}
	}
	must(t, "", "-n", s.ns, "scale", "statefulset", s.app, "--replicas=1")
	pod, node := podOf(t, s.ns, s.app, 180*time.Second)
	for file, want := range map[string]string{"blob": s.blob, "last": s.last} {
		if got := checksum(t, s.ns, pod, file); got != want {
			t.Fatalf("%s %s reads %s on %s, the pod wrote %s", when, file, got, node, want)
		}
	}
	return pod
}
