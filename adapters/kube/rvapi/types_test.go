package rvapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

func TestNamesAreValidForEveryVolumeID(t *testing.T) {
	ids := []volume.ID{"pvc-0b6f1c0e-4a51-4f0c-9d0e-2f3b1a5c6d7e", "Vol_Upper", "a.b", "x" + volume.ID(strings.Repeat("y", 127)), "9-lives", "trailing-"}
	for _, id := range ids {
		if errs := validation.IsDNS1123Subdomain(ObjectName(id)); len(errs) > 0 {
			t.Errorf("ObjectName(%q) = %q: %v", id, ObjectName(id), errs)
		}
		if errs := validation.IsQualifiedName(UsableLabel(id)); len(errs) > 0 {
			t.Errorf("UsableLabel(%q) = %q: %v", id, UsableLabel(id), errs)
		}
	}
	if got := ObjectName("pvc-1"); got != "pvc-1" {
		t.Errorf("a valid name is kept: %q", got)
	}
	if got := UsableLabel("pvc-1"); got != "replica.ferry.zfs.csi.io/pvc-1" {
		t.Errorf("a valid label name is kept: %q", got)
	}
	if ObjectName("Vol_Upper") == ObjectName("vol_upper") {
		t.Error("two IDs got one object name")
	}
}

// FromState and ToState are inverses for every valid state, GUIDs beyond
// int64 included, and a fork a takeover left (a copy on a fenced branch
// must stay one: were the mark dropped, it would count as ready and newest
// again).
func TestStatusRoundTrips(t *testing.T) {
	s := replica.State{Volume: "pvc-1", ReplicationFactor: 3, Epoch: 4, Primary: "b", Version: "17", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 1<<64 - 1, Fetching: replica.Snap{Number: 9, Epoch: 4, GUID: 1 << 63},
			Forked: replica.Fork{Epoch: 3, At: replica.Snap{Number: 2, Epoch: 2, GUID: 1<<64 - 2}}, Taker: true, Resumed: 3},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 4, SnapshotGUID: 5, Active: true, Ready: true, SnapshotTaken: 1_700_000_000},
		{Node: "c"},
	}}
	wire, err := json.Marshal(FromState(s))
	if err != nil {
		t.Fatal(err)
	}
	var back ReplicatedVolume
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	got, err := ToState(back)
	if err != nil {
		t.Fatal(err)
	}
	if got.Volume != s.Volume || got.ReplicationFactor != 3 || got.Epoch != 4 || got.Primary != "b" || got.Version != "17" || len(got.Replicas) != 3 {
		t.Fatalf("round trip: %+v", got)
	}
	for i := range s.Replicas {
		if got.Replicas[i] != s.Replicas[i] {
			t.Errorf("replica %d: %+v, want %+v", i, got.Replicas[i], s.Replicas[i])
		}
	}
	if !got.Replicas[0].OnFencedBranch() {
		t.Error("the copy a takeover left is no longer on its fenced branch")
	}
	rv := FromState(s)
	if rv.Status.Phase != "Degraded" || rv.Status.ReadyReplicas != 1 || rv.Status.Newest != "ferry-4-9" || rv.Status.MaxLag != 9 ||
		rv.Status.Receiving != 1 || rv.Status.NewestTime == nil || rv.Status.NewestTime.Unix() != 1_700_000_000 {
		t.Errorf("summary: %+v", rv.Status)
	}
	if !strings.Contains(string(wire), `"newestTime":"2023-11-14T22:13:20Z"`) {
		t.Errorf("the newest snapshot's time is not an RFC 3339 time on the wire: %s", wire)
	}
	bad := FromState(s)
	bad.Status.Replicas[0].SnapshotGUID = "0x12"
	if _, err := ToState(bad); err == nil {
		t.Error("a GUID that is no decimal number was accepted")
	}
	bad = FromState(s)
	bad.Status.Replicas[2].Snapshot = -3
	if _, err := ToState(bad); err == nil {
		t.Error("a negative snapshot was accepted")
	}
	bad = FromState(s)
	bad.Status.Replicas[0].Forked.At.GUID = "x"
	if _, err := ToState(bad); err == nil {
		t.Error("a fork whose GUID is no decimal number was accepted")
	}
	bad = FromState(s)
	bad.Status.Replicas[0].Forked.Epoch = 5
	if _, err := ToState(bad); err == nil {
		t.Error("a fork of an epoch after the volume's was accepted")
	}
}

// The spec's snapshot interval reaches the state when Ferry can keep it;
// a malformed or out-of-range one (edited by hand past the schema) leaves
// the volume managers' own.
func TestTheSpecsSnapshotIntervalReachesTheState(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "1m0s": time.Minute, "2h": 2 * time.Hour, "1500ms": 1500 * time.Millisecond,
		"": 0, "soon": 0, "500ms": 0, "-5s": 0, "48h": 0,
	} {
		rv := FromState(replica.State{Volume: "v", ReplicationFactor: 2})
		rv.Spec.SnapshotInterval = in
		st, err := ToState(rv)
		if err != nil || st.SnapshotInterval != want {
			t.Errorf("spec.snapshotInterval %q: state %s, %v; want %s", in, st.SnapshotInterval, err, want)
		}
	}
}

// The spec's properties reach the state, normalised; a value the domain
// refuses (an edit the schema let through) is left out alone, the others
// still reach every copy.
func TestTheSpecsPropertiesReachTheStateOneBadValueLeftOut(t *testing.T) {
	rv := FromState(replica.State{Volume: "v", ReplicationFactor: 2})
	rv.Spec.Properties = map[string]string{"atime": "off", "compression": "rot13", "recordsize": "16384"}
	st, err := ToState(rv)
	if err != nil || len(st.Properties) != 2 || st.Properties["atime"] != "off" || st.Properties["recordsize"] != "16384" {
		t.Errorf("state properties %v (%v), want atime and recordsize only", st.Properties, err)
	}
	rv.Spec.Properties = nil
	if st, _ := ToState(rv); st.Properties != nil {
		t.Errorf("no spec properties: state %v, want nil", st.Properties)
	}
}

// A rebuilt state's awaited nodes (replica.State.Awaiting) and the
// volume's size round-trip; the size comes from the spec.
func TestARebuiltStatesAwaitedNodesAndTheSizeRoundTrip(t *testing.T) {
	s, err := replica.Rediscover("pvc-2", 2, "a", replica.Snap{Number: 3, Epoch: 5, GUID: 9}, []replica.Node{"b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	rv := FromState(s)
	rv.Spec.CapacityBytes = 1 << 30
	got, err := ToState(rv)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Awaiting) != 2 || got.Awaiting[0] != "b" || got.Awaiting[1] != "c" || got.Epoch != s.Epoch || got.CapacityBytes != 1<<30 {
		t.Fatalf("round trip: %+v", got)
	}
	rv.Status.Awaiting = []string{"c", "b"}
	if _, err := ToState(rv); err == nil {
		t.Error("unsorted awaited nodes were accepted")
	}
}

// The status carries its format: written as StateFormat, read when
// absent (an older writer's) or known, refused when newer than this build
// reads, naming both.
func TestAStatusOfANewerFormatIsRefusedNotMisread(t *testing.T) {
	s := replica.State{Volume: "pvc-f", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{{Node: "a", Snapshot: 1, SnapshotEpoch: 1}}}
	rv := FromState(s)
	if rv.Status.Format != StateFormat {
		t.Fatalf("written format %d, want %d", rv.Status.Format, StateFormat)
	}
	rv.Status.Format = 0
	if _, err := ToState(rv); err != nil {
		t.Fatalf("a status written before the format field: %v", err)
	}
	rv.Status.Format = MaxStateFormat + 1
	_, err := ToState(rv)
	if !errors.Is(err, ports.ErrIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", MaxStateFormat+1)) {
		t.Fatalf("a newer format: %v", err)
	}
}
