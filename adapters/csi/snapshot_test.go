package csi_test

import (
	"context"
	"strings"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/domain/volume"
)

func fromSnapshot(id string) *spec.VolumeContentSource {
	return &spec.VolumeContentSource{Type: &spec.VolumeContentSource_Snapshot{Snapshot: &spec.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *spec.VolumeContentSource {
	return &spec.VolumeContentSource{Type: &spec.VolumeContentSource_Volume{Volume: &spec.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func TestCreateSnapshotIsIdempotentAndNamesAreUniqueAcrossVolumes(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	e.mustCreate(t, createReq("vol-2", 0))
	first := e.mustSnapshot(t, "snap-1", "vol-1")
	if first.GetSnapshotId() == "" || first.GetSourceVolumeId() != "vol-1" || !first.GetReadyToUse() || first.GetCreationTime() == nil {
		t.Fatalf("snapshot = %v", first)
	}
	again := e.mustSnapshot(t, "snap-1", "vol-1")
	if again.GetSnapshotId() != first.GetSnapshotId() {
		t.Fatalf("the same request gave %q, then %q", first.GetSnapshotId(), again.GetSnapshotId())
	}
	cases := []struct {
		what string
		req  *spec.CreateSnapshotRequest
		want codes.Code
	}{
		{"the same name for another volume", &spec.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: "vol-2"}, codes.AlreadyExists},
		{"a missing source volume", &spec.CreateSnapshotRequest{Name: "snap-2", SourceVolumeId: "nope"}, codes.NotFound},
		{"no name", &spec.CreateSnapshotRequest{SourceVolumeId: "vol-1"}, codes.InvalidArgument},
		{"no source volume", &spec.CreateSnapshotRequest{Name: "snap-2"}, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			_, err := e.ctrl.CreateSnapshot(ctx(t), c.req)
			wantCode(t, err, c.want)
		})
	}
	if ids := e.snapshotIDs(t); len(ids) != 1 || ids[0] != first.GetSnapshotId() {
		t.Fatalf("ListSnapshots = %q, want only %q", ids, first.GetSnapshotId())
	}
}

func TestCreateSnapshotWithALongNameRoundTrips(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	name := strings.Repeat("s", volume.MaxSnapshotNameLength)
	snap := e.mustSnapshot(t, name, "vol-1")
	if again := e.mustSnapshot(t, name, "vol-1"); again.GetSnapshotId() != snap.GetSnapshotId() {
		t.Fatalf("a retried long name gave %q, then %q", snap.GetSnapshotId(), again.GetSnapshotId())
	}
	resp, err := e.ctrl.ListSnapshots(ctx(t), &spec.ListSnapshotsRequest{SnapshotId: snap.GetSnapshotId()})
	wantCode(t, err, codes.OK)
	if len(resp.GetEntries()) != 1 {
		t.Fatalf("ListSnapshots by id found %d entries", len(resp.GetEntries()))
	}
	_, err = e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()})
	wantCode(t, err, codes.OK)
	if ids := e.snapshotIDs(t); len(ids) != 0 {
		t.Fatalf("snapshots after delete = %q", ids)
	}
}

func TestDeleteSnapshotOfAnUnknownOrMalformedIDSucceeds(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	for _, id := range []string{"vol-1@nope", "nope@nope", "no-at-sign", "@", "vol-1@", "a@b@c", "vol-1@csi-x"} {
		t.Run(id, func(t *testing.T) {
			_, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: id})
			wantCode(t, err, codes.OK)
		})
	}
	_, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

func TestAVolumeCreatedFromASnapshotHoldsTheSnapshotsFiles(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("src", 0))
	e.writeFile(t, "src", "data.txt", "at snapshot time")
	snap := e.mustSnapshot(t, "snap-1", "src")
	e.writeFile(t, "src", "data.txt", "changed after the snapshot")

	req := createReq("copy", 0)
	req.VolumeContentSource = fromSnapshot(snap.GetSnapshotId())
	v := e.mustCreate(t, req)
	if got := e.readFile(t, "copy", "data.txt"); got != "at snapshot time" {
		t.Fatalf("the copy holds %q", got)
	}
	if v.GetContentSource().GetSnapshot().GetSnapshotId() != snap.GetSnapshotId() || v.GetCapacityBytes() != volume.DefaultCapacity {
		t.Fatalf("volume = %v", v)
	}
	if again := e.mustCreate(t, req); again.GetVolumeId() != v.GetVolumeId() || again.GetCapacityBytes() != v.GetCapacityBytes() {
		t.Fatalf("the retried copy = %v, want %v", again, v)
	}
	// The copy is independent: the snapshot and its volume can go.
	if _, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "src"}); err != nil {
		t.Fatal(err)
	}
	if got := e.readFile(t, "copy", "data.txt"); got != "at snapshot time" {
		t.Fatalf("after the source went the copy holds %q", got)
	}
	if ids := e.snapshotIDs(t); len(ids) != 0 {
		t.Fatalf("snapshots left = %q", ids)
	}
}

func TestAVolumeCreatedFromAnotherVolumeHoldsItsFilesAndLeavesNoSnapshot(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("src", 0))
	e.writeFile(t, "src", "data.txt", "source contents")

	req := createReq("clone", 0)
	req.VolumeContentSource = fromVolume("src")
	v := e.mustCreate(t, req)
	if got := e.readFile(t, "clone", "data.txt"); got != "source contents" {
		t.Fatalf("the clone holds %q", got)
	}
	if v.GetContentSource().GetVolume().GetVolumeId() != "src" {
		t.Fatalf("content_source = %v", v.GetContentSource())
	}
	if again := e.mustCreate(t, req); again.GetVolumeId() != v.GetVolumeId() || again.GetCapacityBytes() != v.GetCapacityBytes() {
		t.Fatalf("the retried clone = %v, want %v", again, v)
	}
	// Writing to the clone leaves the source alone.
	e.writeFile(t, "clone", "data.txt", "clone contents")
	if got := e.readFile(t, "src", "data.txt"); got != "source contents" {
		t.Fatalf("the source holds %q after writing to the clone", got)
	}
	// The temporary snapshot is gone: the source deletes at once.
	if ids := e.snapshotIDs(t); len(ids) != 0 {
		t.Fatalf("snapshots left = %q", ids)
	}
	_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "src"})
	wantCode(t, err, codes.OK)
	if ids := e.volumeIDs(t); len(ids) != 1 || ids[0] != "clone" {
		t.Fatalf("volumes = %q, want [clone]", ids)
	}
}

func TestCreateVolumeFromABadSourceAnswersItsCodeAndCreatesNothing(t *testing.T) {
	big := strings.Repeat("x", 2*int(volume.MiB))
	cases := []struct {
		what   string
		source *spec.VolumeContentSource
		r      *spec.CapacityRange
		want   codes.Code
	}{
		{"a missing snapshot", fromSnapshot("src@nope"), nil, codes.NotFound},
		{"a snapshot of a missing volume", fromSnapshot("nope@snap-1"), nil, codes.NotFound},
		{"a malformed snapshot id", fromSnapshot("../../etc"), nil, codes.NotFound},
		{"an empty snapshot id", fromSnapshot(""), nil, codes.InvalidArgument},
		{"a missing volume", fromVolume("nope"), nil, codes.NotFound},
		{"a malformed volume id", fromVolume("../../etc"), nil, codes.NotFound},
		{"an empty volume id", fromVolume(""), nil, codes.InvalidArgument},
		{"a source with neither", &spec.VolumeContentSource{}, nil, codes.InvalidArgument},
		{"a snapshot holding more than the size", fromSnapshot("src@snap-1"), &spec.CapacityRange{RequiredBytes: volume.MiB, LimitBytes: volume.MiB}, codes.OutOfRange},
		{"a volume larger than the size", fromVolume("src"), &spec.CapacityRange{RequiredBytes: volume.MiB}, codes.OutOfRange},
		{"a copy of a snapshot beyond the pool", fromSnapshot("src@snap-1"), &spec.CapacityRange{RequiredBytes: poolBytes}, codes.ResourceExhausted},
		{"a copy of a volume beyond the pool", fromVolume("src"), &spec.CapacityRange{RequiredBytes: poolBytes}, codes.ResourceExhausted},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("src", 0))
			e.writeFile(t, "src", "big", big)
			e.mustSnapshot(t, "snap-1", "src")
			req := createReq("copy", 0)
			req.VolumeContentSource, req.CapacityRange = c.source, c.r
			_, err := e.ctrl.CreateVolume(ctx(t), req)
			wantCode(t, err, c.want)
			if names := e.storeEntries(t); len(names) != 1 || names[0] != "src" {
				t.Fatalf("store directory holds %q, want [src]", names)
			}
			if ids := e.snapshotIDs(t); len(ids) != 1 {
				t.Fatalf("snapshots = %q, want [src@snap-1]", ids)
			}
		})
	}
}

// A clone's source may be the volume being created only if it exists; a
// source that does not exist is NOT_FOUND, whatever its name.
func TestCreateVolumeFromItselfWhenItDoesNotExistIsNotFound(t *testing.T) {
	e := newEnv(t)
	req := createReq("self", 0)
	req.VolumeContentSource = fromVolume("self")
	_, err := e.ctrl.CreateVolume(ctx(t), req)
	wantCode(t, err, codes.NotFound)
	e.assertNothingCreated(t)
}

// CSI: with no capacity_range the plugin chooses the size, and a volume
// pre-populated from a source must be able to hold it; refusing with
// OUT_OF_RANGE a request that named no range leaves the CO nothing to fix.
func TestACloneWithoutACapacityRangeIsAtLeastAsLargeAsItsSource(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("src", 2*volume.GiB))
	req := createReq("clone", 0)
	req.VolumeContentSource = fromVolume("src")
	resp, err := e.ctrl.CreateVolume(ctx(t), req)
	wantCode(t, err, codes.OK)
	if got := resp.GetVolume().GetCapacityBytes(); got < 2*volume.GiB {
		t.Fatalf("clone capacity = %d, smaller than its 2 GiB source", got)
	}
}

// Two different CSI snapshot names are two snapshots. A short name of the
// form "h-<digest>" must not alias the store name a long name is hashed to
// (csi-h-<digest>): otherwise creating it fails and deleting it destroys
// the long-named snapshot.
func TestAShortSnapshotNameNeverAliasesAHashedLongOne(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	long := strings.Repeat("l", 100)
	longSnap := e.mustSnapshot(t, long, "vol-1")
	alias := "h-" + volume.Digest(long)

	// Deleting the alias, which was never created, is a no-op.
	_, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: "vol-1@" + alias})
	wantCode(t, err, codes.OK)
	if ids := e.snapshotIDs(t); len(ids) != 1 || ids[0] != longSnap.GetSnapshotId() {
		t.Errorf("deleting the never-created %q destroyed the long-named snapshot: snapshots = %q", alias, ids)
		longSnap = e.mustSnapshot(t, long, "vol-1")
	}
	// Creating the alias makes a second snapshot.
	_, err = e.ctrl.CreateSnapshot(ctx(t), &spec.CreateSnapshotRequest{Name: alias, SourceVolumeId: "vol-1"})
	wantCode(t, err, codes.OK)
	if ids := e.snapshotIDs(t); len(ids) != 2 {
		t.Fatalf("snapshots = %q, want the long-named one and %q", ids, alias)
	}
}

func TestARestoredVolumeGetsItsStorageClassPropertiesNotTheDefaults(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("src", 0))
	snap := e.mustSnapshot(t, "snap-props", "src")
	req := createReq("restored", 0)
	req.Parameters = map[string]string{"compression": "off", "atime": "off", "recordsize": "64k"}
	req.VolumeContentSource = fromSnapshot(snap.GetSnapshotId())
	e.mustCreate(t, req)
	info, err := e.mem.GetVolume(context.Background(), "restored")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"compression": "off", "atime": "off", "recordsize": "65536"}
	for k, v := range want {
		if info.Properties[k] != v {
			t.Errorf("restored volume %s = %q, want %q (a stream carries no properties)", k, info.Properties[k], v)
		}
	}
}
