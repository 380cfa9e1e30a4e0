package liveness

import (
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestTheLedgerGrowsWithinATermWhateverTheViewShows(t *testing.T) {
	l := NewLedger("a")
	l.Intend("v", 2, []replica.Node{"b"})
	// A view older than the acknowledgement (b not flagged yet) takes
	// nothing away.
	old := state()
	for i := range old.Replicas {
		old.Replicas[i].Taker = false
	}
	l.Learn(old)
	if got := l.Takers("v"); !slices.Equal(got, []replica.Node{"b"}) {
		t.Fatalf("takers %v after a stale view, want [b]", got)
	}
	// A view flagging c (an acknowledgement by an earlier process of this
	// node) adds it.
	l.Learn(state())
	if got := l.Takers("v"); !slices.Equal(got, []replica.Node{"b", "c"}) {
		t.Fatalf("takers %v, want [b c]", got)
	}
	// An older epoch's view changes nothing.
	older := state()
	older.Epoch = 1
	older.Primary = "b"
	older.Replicas[0].Active, older.Replicas[0].SnapshotEpoch, older.Replicas[1].SnapshotEpoch, older.Replicas[2].SnapshotEpoch = false, 1, 1, 1
	l.Learn(older)
	if got := l.Takers("v"); len(got) != 2 {
		t.Fatalf("takers %v after an older epoch's view, want [b c]", got)
	}
	if got := l.AllTakers(); !slices.Equal(got, []replica.Node{"b", "c"}) {
		t.Fatalf("all takers %v", got)
	}
}

func TestTheLedgerForgetsATermOnlyWhenAStateShowsItOver(t *testing.T) {
	l := NewLedger("a")
	l.Intend("v", 2, []replica.Node{"b", "a"})
	if got := l.Takers("v"); !slices.Equal(got, []replica.Node{"b"}) {
		t.Fatalf("takers %v, want [b] (never itself)", got)
	}
	// Stepped down in the same epoch: over.
	down := state()
	down.Replicas[0].Active = false
	l.Learn(down)
	if len(l.Terms()) != 0 {
		t.Fatalf("terms %v after the step-down", l.Terms())
	}
	// Taken over: a later epoch with another primary.
	l.Intend("v", 2, []replica.Node{"b"})
	over := state()
	over.Epoch, over.Primary = 3, "b"
	over.Replicas[0].Active, over.Replicas[1].Active = false, true
	l.Learn(over)
	if len(l.Terms()) != 0 {
		t.Fatalf("terms %v after a takeover", l.Terms())
	}
	// A later term of its own starts afresh.
	l.Intend("v", 2, []replica.Node{"b"})
	again := state()
	again.Epoch = 4
	again.Replicas[1].Taker = false
	l.Learn(again)
	if got := l.Terms(); len(got) != 1 || got[0].Epoch != 4 || !slices.Equal(got[0].Takers, []replica.Node{"c"}) {
		t.Fatalf("terms %v, want epoch 4 with [c]", got)
	}
	// An acknowledgement intended for an older epoch is ignored.
	l.Intend("v", 3, []replica.Node{"d"})
	if got := l.Takers("v"); !slices.Equal(got, []replica.Node{"c"}) {
		t.Fatalf("takers %v, want [c]", got)
	}
	l.Forget("v")
	if len(l.Terms()) != 0 {
		t.Fatal("forgotten volume still listed")
	}
}
