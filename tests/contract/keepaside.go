package contract

import (
	"errors"
	"testing"

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
