package replica

import (
	"testing"
)

func snaps(spec ...[3]uint64) []Snap {
	var out []Snap
	for _, s := range spec {
		out = append(out, Snap{Number: SnapshotNumber(s[0]), GUID: s[1], Epoch: Epoch(s[2])})
	}
	return out
}

func TestPlanTransfer(t *testing.T) {
	cases := []struct {
		name          string
		local, remote []Snap
		kind          PlanKind
		base, target  SnapshotNumber
		discard       int
	}{
		{"empty peer", snaps([3]uint64{1, 11, 1}), nil, PlanNothing, 0, 0, 0},
		{"no local data: full", nil, snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 1}), PlanFull, 0, 2, 0},
		{"behind: incremental from the newest common", snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 1}),
			snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 1}, [3]uint64{3, 13, 1}), PlanIncremental, 2, 3, 0},
		{"same number, other GUID is not a base", snaps([3]uint64{1, 11, 1}, [3]uint64{2, 99, 1}),
			snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 2}, [3]uint64{3, 13, 2}), PlanRollbackIncremental, 1, 3, 1},
		{"up to date", snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 1}), snaps([3]uint64{2, 12, 1}), PlanNothing, 2, 2, 0},
		{"ahead of the peer", snaps([3]uint64{1, 11, 1}, [3]uint64{2, 12, 1}), snaps([3]uint64{1, 11, 1}), PlanNothing, 1, 1, 0},
		{"old primary diverged: roll back", snaps([3]uint64{5, 15, 1}, [3]uint64{6, 16, 1}, [3]uint64{7, 17, 1}),
			snaps([3]uint64{5, 15, 1}, [3]uint64{6, 26, 2}), PlanRollbackIncremental, 5, 6, 2},
		{"diverged in the peer's own epoch: conflict", snaps([3]uint64{5, 15, 2}, [3]uint64{6, 16, 2}),
			snaps([3]uint64{5, 15, 2}, [3]uint64{6, 26, 2}), PlanConflict, 5, 6, 0},
		{"diverged in a newer epoch than the peer: conflict", snaps([3]uint64{5, 15, 1}, [3]uint64{6, 16, 3}),
			snaps([3]uint64{5, 15, 1}, [3]uint64{6, 26, 2}), PlanConflict, 5, 6, 0},
		{"nothing in common, all older: replace", snaps([3]uint64{1, 1, 1}), snaps([3]uint64{4, 44, 2}), PlanReplace, 0, 4, 1},
		{"nothing in common, not older: conflict", snaps([3]uint64{9, 1, 2}), snaps([3]uint64{4, 44, 2}), PlanConflict, 0, 4, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := PlanTransfer(c.local, c.remote)
			if p.Kind != c.kind || p.Base.Number != c.base || p.Target.Number != c.target || len(p.Discard) != c.discard || p.Reason == "" {
				t.Fatalf("got %v base %d target %d discard %d (%q); want %v base %d target %d discard %d",
					p.Kind, p.Base.Number, p.Target.Number, len(p.Discard), p.Reason, c.kind, c.base, c.target, c.discard)
			}
		})
	}
}

// checkPlan holds PlanTransfer's invariants for any input.
func checkPlan(t *testing.T, local, remote []Snap, p Plan) {
	t.Helper()
	has := func(set []Snap, s Snap) bool {
		for _, x := range set {
			if x == s {
				return true
			}
		}
		return false
	}
	switch p.Kind {
	case PlanIncremental, PlanRollbackIncremental:
		if !has(local, p.Base) || !has(remote, p.Base) {
			t.Fatalf("base %+v is not held by both sides: local %v remote %v", p.Base, local, remote)
		}
		if !p.Target.Newer(p.Base) {
			t.Fatalf("target %+v is not newer than base %+v", p.Target, p.Base)
		}
	case PlanFull:
		if len(local) != 0 {
			t.Fatalf("full stream planned onto a replica holding %v", local)
		}
	}
	if len(remote) > 0 && p.Kind != PlanNothing && p.Target != newest(remote) {
		t.Fatalf("target %+v is not the peer's newest %+v", p.Target, newest(remote))
	}
	for _, d := range p.Discard {
		if !p.Target.Newer(d) {
			t.Fatalf("discards %+v, not older than the target %+v", d, p.Target)
		}
		if !has(local, d) {
			t.Fatalf("discards %+v that the replica does not hold", d)
		}
	}
	if (p.Kind == PlanRollbackIncremental || p.Kind == PlanReplace) != (len(p.Discard) > 0) {
		t.Fatalf("%v with %d discarded snapshots", p.Kind, len(p.Discard))
	}
}

// decodeSnaps turns fuzz bytes into a replica's history: numbers ascend,
// epochs never go down, and each snapshot belongs to one of two lineages
// (a bit of the input). A GUID names one (number, epoch, lineage): two
// replicas share a snapshot exactly when they drew the same one, as in ZFS,
// where a GUID is one snapshot's identity everywhere.
func decodeSnaps(b []byte) []Snap {
	var out []Snap
	n, e := SnapshotNumber(0), Epoch(1)
	for i := 0; i+1 < len(b) && len(out) < 12; i += 2 {
		n += SnapshotNumber(b[i]%3) + 1
		e += Epoch(b[i] >> 6 & 1)
		lineage := uint64(b[i+1] & 1)
		out = append(out, Snap{Number: n, Epoch: e, GUID: uint64(n)*1000 + uint64(e)*10 + lineage + 1})
	}
	return out
}

func FuzzPlanTransferNeverPlansABaseOneSideLacks(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3}, []byte{0, 1, 0, 2, 0, 4, 0, 5})
	f.Add([]byte{}, []byte{1, 1})
	f.Add([]byte{0x40, 1, 0x40, 2}, []byte{0, 3})
	f.Add([]byte{0, 1, 0x40, 7}, []byte{0, 1, 0x40, 6, 0x40, 5})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		local, remote := decodeSnaps(a), decodeSnaps(b)
		checkPlan(t, local, remote, PlanTransfer(local, remote))
	})
}
