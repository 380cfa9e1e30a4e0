package replica

import (
	"errors"
	"slices"
	"testing"
)

func TestOnlyAForeignSnapshotADiscardWouldDestroyHoldsItBack(t *testing.T) {
	list := []StoredSnapshot{
		{Name: "ferry-1-3", Txg: 10},
		{Name: "nightly", Txg: 11}, // an operator's, before the rollback target's end
		{Name: "ferry-1-4", Txg: 12},
		{Name: "csi-snap-pvc-1", Txg: 13},
		{Name: "ferry-1-5", Txg: 14},
		{Name: "ferry-kept", Txg: 15},
	}
	cases := []struct {
		name   string
		after  string
		except []string
		want   []string
		err    error
	}{
		{"the whole copy: every foreign one", "", nil, []string{"nightly", "csi-snap-pvc-1", "ferry-kept"}, nil},
		{"the whole copy, a snapshot made for a moment excepted", "", []string{"ferry-kept"}, []string{"nightly", "csi-snap-pvc-1"}, nil},
		{"a rollback: only those after the target", "ferry-1-4", nil, []string{"csi-snap-pvc-1", "ferry-kept"}, nil},
		{"a rollback past every foreign one", "ferry-1-5", []string{"ferry-kept"}, nil, nil},
		{"a rollback to a snapshot the copy lacks", "ferry-1-9", nil, nil, ErrSnapshotGone},
	}
	for _, c := range cases {
		got, err := ForeignAfter(list, c.after, c.except...)
		if !errors.Is(err, c.err) || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, got, err, c.want, c.err)
		}
	}
}

func TestACopyIsDestroyedOnlyWhileTheHoldersItsLeaveCountedOnRemain(t *testing.T) {
	st := State{ReplicationFactor: 2, Replicas: []Replica{{Node: "a"}, {Node: "b"}}}
	if ok, still := HoldersRemain(st, []Node{"a", "b"}); !ok || still != 2 {
		t.Fatalf("both holders listed: %v, %d", ok, still)
	}
	// b left meanwhile (its own leave, a takeover's removal).
	st.Replicas = st.Replicas[:1]
	if ok, still := HoldersRemain(st, []Node{"a", "b"}); ok || still != 1 {
		t.Fatalf("one holder of two listed: %v, %d", ok, still)
	}
	// The factor lowered meanwhile: one is enough.
	st.ReplicationFactor = 1
	if ok, _ := HoldersRemain(st, []Node{"a", "b"}); !ok {
		t.Fatal("the factor is 1 and a remains")
	}
}

func TestWhatAFailedFetchMeans(t *testing.T) {
	cases := []struct {
		name string
		f    FetchFailure
		want FetchVerdict
	}{
		{"the stream did not open", FetchFailure{Opening: true}, FetchVerdict{}},
		{"a resume the peer cannot serve: start over", FetchFailure{Opening: true, Resumed: true, PeerCannotResume: true}, FetchVerdict{DiscardPartial: true}},
		{"a resume whose peer was unreachable: try it again", FetchFailure{Opening: true, Resumed: true}, FetchVerdict{}},
		{"an incremental receive on a changed copy", FetchFailure{Incremental: true, Conflict: true, Bytes: 10, PartialKept: true}, FetchVerdict{Modified: true}},
		{"a full receive that conflicts is no modified copy", FetchFailure{Conflict: true, Bytes: 10}, FetchVerdict{}},
		{"a base that is not the newest here", FetchFailure{Incremental: true, BaseMismatch: true, Conflict: true}, FetchVerdict{CheckForeign: true}},
		{"a resumed fetch the peer sent nothing for: start over", FetchFailure{Resumed: true, Incremental: true}, FetchVerdict{DiscardPartial: true}},
		{"a resumed fetch stopped before a byte: resumed later", FetchFailure{Resumed: true, Cancelled: true, PartialKept: true}, FetchVerdict{KeepTarget: true}},
		{"a resumed fetch cut mid-way: resumed later", FetchFailure{Resumed: true, Bytes: 1 << 20, PartialKept: true}, FetchVerdict{KeepTarget: true}},
		{"a fetch cut mid-way, the partial receive kept", FetchFailure{Incremental: true, Bytes: 1 << 20, PartialKept: true}, FetchVerdict{KeepTarget: true}},
		{"a fetch cut mid-way, nothing kept (zfs-fuse)", FetchFailure{Incremental: true, Bytes: 1 << 20}, FetchVerdict{}},
		{"a full pool: the partial receive goes, freeing its space", FetchFailure{Bytes: 34 << 20, PartialKept: true, NoSpace: true}, FetchVerdict{DiscardPartial: true}},
		{"a full pool, a resume: the partial receive goes", FetchFailure{Resumed: true, Incremental: true, Bytes: 1 << 20, PartialKept: true, NoSpace: true}, FetchVerdict{DiscardPartial: true}},
		{"a full pool, nothing kept: nothing to discard", FetchFailure{Bytes: 34 << 20, NoSpace: true}, FetchVerdict{}},
	}
	for _, c := range cases {
		if got := OnFetchFailure(c.f); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
