package replica

import "testing"

// A rollback keeps a copy aside exactly when what it discards may be
// writes held nowhere else: a snapshot of an ended epoch, or changes never
// snapshotted after one. Ancestors of the newest snapshot (of the current epoch)
// that the peer pruned are the volume's own: nothing is kept for them.
func TestRollbackKeepsAFencedTermsWritesOnly(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "a"})
	m.state = State{Epoch: 3, Primary: "b"}
	base := Snap{Number: 1, Epoch: 1, GUID: 11}
	cases := []struct {
		name    string
		discard []Snap
		changed bool
		want    string
	}{
		{"a snapshot of an ended epoch", []Snap{{Number: 2, Epoch: 2, GUID: 12}}, false, "fenced-e3-ferry-2-2"},
		{"the newest of several names the copy", []Snap{{Number: 2, Epoch: 2, GUID: 12}, {Number: 4, Epoch: 2, GUID: 14}, {Number: 3, Epoch: 3, GUID: 13}}, false, "fenced-e3-ferry-3-3"},
		{"changes never snapshotted after a snapshot of an ended epoch", nil, true, "fenced-e3-ferry-1-1"},
		{"pruned ancestors of the current epoch", []Snap{{Number: 2, Epoch: 3, GUID: 12}}, false, ""},
	}
	for _, c := range cases {
		if got := m.keepAs(base, c.discard, c.changed); got != c.want {
			t.Errorf("%s: keepAs = %q, want %q", c.name, got, c.want)
		}
	}
	// A secondary's changes on top of the current epoch's snapshot (access
	// times of reads) are no one's writes: kept, they would fill the pool.
	if got := m.keepAs(Snap{Number: 5, Epoch: 3, GUID: 15}, nil, true); got != "" {
		t.Errorf("changes after a snapshot of the current epoch: keepAs = %q, want none", got)
	}
}
