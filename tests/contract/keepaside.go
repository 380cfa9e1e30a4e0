package contract

import (
	"errors"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// KeptFiles reads the files of a copy kept aside (SnapshotStore.KeepAside)
// by the store's own means: what an operator inspecting it would see.
type KeptFiles func(t *testing.T, s ports.SnapshotStore, c ports.KeptCopy) map[string]string

// RunKeepAside runs the KeepAside part of the SnapshotStore contract.
func RunKeepAside(t *testing.T, newStore StoreFactory, files KeptFiles) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s ports.SnapshotStore, files KeptFiles)
	}{
		{"a copy kept aside holds the data as it was, changes never snapshotted included, and outlives a rollback and the volume", keptCopyOutlivesTheVolume},
		{"keeping aside again under the same name returns the first copy", keepAsideIsIdempotent},
		{"a missing volume keeps nothing aside", keepAsideMissingVolume},
		{"the copies kept aside are listed with their volume, size and time until dropped", keptCopiesAreListed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t), files) })
	}
}

func wantFiles(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("kept files %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("kept files %v, want %v", got, want)
		}
	}
}

func keptCopyOutlivesTheVolume(t *testing.T, s ports.SnapshotStore, files KeptFiles) {
	info := mustCreate(t, s, "vol-a")
	write(t, info, "f", "one")
	if _, err := s.CreateSnapshot(ctx, "vol-a", "s1", nil); err != nil {
		t.Fatal(err)
	}
	write(t, info, "f", "two")
	if _, err := s.CreateSnapshot(ctx, "vol-a", "s2", nil); err != nil {
		t.Fatal(err)
	}
	write(t, info, "g", "never snapshotted")
	kept, err := s.KeepAside(ctx, "vol-a", "fenced-e3-ferry-2-2")
	if err != nil {
		t.Fatalf("KeepAside: %v", err)
	}
	if kept.Name == "" || kept.Drop == "" || kept.Inspect == "" {
		t.Fatalf("KeepAside = %+v: it must say what it kept and how to inspect and drop it", kept)
	}
	want := map[string]string{"f": "two", "g": "never snapshotted"}
	wantFiles(t, files(t, s, kept), want)

	// The volume is as it was: its snapshots too.
	list, err := s.ListSnapshots(ctx, "vol-a")
	if err != nil || len(list) != 2 || list[0].Name != "s1" || list[1].Name != "s2" {
		t.Fatalf("the volume's snapshots after KeepAside: %+v, %v", list, err)
	}
	if read(t, info, "g") != "never snapshotted" {
		t.Fatal("KeepAside changed the volume")
	}
	vols, err := s.ListVolumes(ctx)
	if err != nil || len(vols) != 1 || vols[0].ID != "vol-a" {
		t.Fatalf("ListVolumes after KeepAside = %+v, %v: the kept copy is no volume", vols, err)
	}
	all, err := s.ListSnapshots(ctx, "")
	if err != nil || len(all) != 2 {
		t.Fatalf("ListSnapshots(all) after KeepAside = %+v, %v: the kept copy is listed nowhere", all, err)
	}

	if err := s.Rollback(ctx, "vol-a", "s1"); err != nil {
		t.Fatal(err)
	}
	wantFiles(t, files(t, s, kept), want)
	if err := s.DestroyVolume(ctx, "vol-a"); err != nil {
		t.Fatalf("DestroyVolume with a copy kept aside: %v", err)
	}
	wantFiles(t, files(t, s, kept), want)
}

func keepAsideIsIdempotent(t *testing.T, s ports.SnapshotStore, files KeptFiles) {
	info := mustCreate(t, s, "vol-a")
	write(t, info, "f", "one")
	if _, err := s.CreateSnapshot(ctx, "vol-a", "s1", nil); err != nil {
		t.Fatal(err)
	}
	write(t, info, "f", "fenced")
	first, err := s.KeepAside(ctx, "vol-a", "k1")
	if err != nil {
		t.Fatal(err)
	}
	write(t, info, "f", "later")
	again, err := s.KeepAside(ctx, "vol-a", "k1")
	if err != nil {
		t.Fatalf("KeepAside again: %v", err)
	}
	if again.Name != first.Name {
		t.Fatalf("KeepAside again named %q, the first %q", again.Name, first.Name)
	}
	wantFiles(t, files(t, s, again), map[string]string{"f": "fenced"})
	list, err := s.ListSnapshots(ctx, "vol-a")
	if err != nil || len(list) != 1 {
		t.Fatalf("the volume's snapshots after KeepAside twice: %+v, %v", list, err)
	}
}

func keepAsideMissingVolume(t *testing.T, s ports.SnapshotStore, _ KeptFiles) {
	if _, err := s.KeepAside(ctx, "nope", "k1"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("KeepAside(nope) = %v, want ErrNotFound", err)
	}
}

func keptCopiesAreListed(t *testing.T, s ports.SnapshotStore, _ KeptFiles) {
	lister, ok := s.(ports.KeptCopies)
	if !ok {
		t.Fatalf("%T keeps copies aside and cannot list them (ports.KeptCopies)", s)
	}
	if list, err := lister.ListKept(ctx); err != nil || len(list) != 0 {
		t.Fatalf("ListKept before any copy = %+v, %v; want none", list, err)
	}
	for _, id := range []volume.ID{"vol-b", "vol-a"} {
		info := mustCreate(t, s, id)
		write(t, info, "f", "fenced writes of "+string(id))
	}
	before := time.Now().Add(-2 * time.Second)
	b, err := s.KeepAside(ctx, "vol-b", "fenced-e3-ferry-2-2")
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.KeepAside(ctx, "vol-a", "fenced-e4-ferry-3-9")
	if err != nil {
		t.Fatal(err)
	}
	list, err := lister.ListKept(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListKept = %+v, %v; want the two copies", list, err)
	}
	for i, want := range []ports.KeptCopy{a, b} {
		got := list[i]
		if got.Name != want.Name || got.Drop != want.Drop || got.Inspect != want.Inspect {
			t.Errorf("ListKept[%d] = %+v, want what KeepAside said: %+v (sorted by name)", i, got, want)
		}
		if got.Volume != []volume.ID{"vol-a", "vol-b"}[i] {
			t.Errorf("ListKept[%d] is of volume %q, want %q", i, got.Volume, []volume.ID{"vol-a", "vol-b"}[i])
		}
		if got.SizeBytes <= 0 {
			t.Errorf("ListKept[%d] has %d bytes", i, got.SizeBytes)
		}
		if !got.Taken.IsZero() && got.Taken.Before(before.Truncate(time.Second)) {
			t.Errorf("ListKept[%d] taken at %v, before the test began (%v)", i, got.Taken, before)
		}
	}
	// A volume's own snapshots and the volume's destruction change nothing.
	if _, err := s.CreateSnapshot(ctx, "vol-a", "s1", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DestroyVolume(ctx, "vol-b"); err != nil {
		t.Fatal(err)
	}
	if again, err := lister.ListKept(ctx); err != nil || len(again) != 2 {
		t.Fatalf("ListKept after a snapshot and a volume's destruction = %+v, %v; want the same two", again, err)
	}
}
