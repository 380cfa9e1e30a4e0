package csi_test

import (
	"fmt"
	"slices"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// pageVolumes walks ListVolumes with max entries per page and returns every
// ID in the order received and the number of pages.
func pageVolumes(t *testing.T, e *env, max int32) ([]string, int) {
	t.Helper()
	var ids []string
	token, pages := "", 0
	for {
		resp, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{MaxEntries: max, StartingToken: token})
		wantCode(t, err, codes.OK)
		pages++
		if max > 0 && len(resp.GetEntries()) > int(max) {
			t.Fatalf("page %d has %d entries, more than max_entries %d", pages, len(resp.GetEntries()), max)
		}
		for _, en := range resp.GetEntries() {
			ids = append(ids, en.GetVolume().GetVolumeId())
		}
		if resp.GetNextToken() == "" {
			return ids, pages
		}
		if pages > 100 {
			t.Fatalf("ListVolumes does not end: token %q", resp.GetNextToken())
		}
		token = resp.GetNextToken()
	}
}

func pageSnapshots(t *testing.T, e *env, req *spec.ListSnapshotsRequest) ([]string, int) {
	t.Helper()
	var ids []string
	pages := 0
	for {
		resp, err := e.ctrl.ListSnapshots(ctx(t), req)
		wantCode(t, err, codes.OK)
		pages++
		if req.GetMaxEntries() > 0 && len(resp.GetEntries()) > int(req.GetMaxEntries()) {
			t.Fatalf("page %d has %d entries, more than max_entries %d", pages, len(resp.GetEntries()), req.GetMaxEntries())
		}
		for _, en := range resp.GetEntries() {
			ids = append(ids, en.GetSnapshot().GetSnapshotId())
		}
		if resp.GetNextToken() == "" {
			return ids, pages
		}
		if pages > 100 {
			t.Fatalf("ListSnapshots does not end: token %q", resp.GetNextToken())
		}
		req.StartingToken = resp.GetNextToken()
	}
}

func TestListVolumesPagesThroughEveryVolumeExactlyOnceInOrder(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := 5; i >= 1; i-- { // created out of order: the listing sorts
		name := fmt.Sprintf("vol-%d", i)
		e.mustCreate(t, createReq(name, 0))
		want = append([]string{name}, want...)
	}
	cases := []struct {
		max   int32
		pages int
	}{{0, 1}, {1, 5}, {2, 3}, {4, 2}, {5, 1}, {100, 1}}
	for _, c := range cases {
		t.Run(fmt.Sprintf("max_entries %d", c.max), func(t *testing.T) {
			got, pages := pageVolumes(t, e, c.max)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %q, want %q", got, want)
			}
			if pages != c.pages {
				t.Fatalf("%d pages, want %d", pages, c.pages)
			}
		})
	}
}

func TestListVolumesDoesNotSkipEntriesWhenOneIsDeletedBetweenPages(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 5; i++ {
		e.mustCreate(t, createReq(fmt.Sprintf("vol-%d", i), 0))
	}
	first, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{MaxEntries: 2})
	wantCode(t, err, codes.OK)
	if _, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-2"}); err != nil {
		t.Fatal(err)
	}
	rest, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{StartingToken: first.GetNextToken()})
	wantCode(t, err, codes.OK)
	var got []string
	for _, en := range rest.GetEntries() {
		got = append(got, en.GetVolume().GetVolumeId())
	}
	if want := []string{"vol-3", "vol-4", "vol-5"}; !slices.Equal(got, want) {
		t.Fatalf("second page after a delete = %q, want %q", got, want)
	}
}

func TestListSnapshotsPagesThroughEverySnapshotExactlyOnceInOrder(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-a", 0))
	e.mustCreate(t, createReq("vol-b", 0))
	e.mustCreate(t, createReq("vol-c", 0)) // no snapshots
	var all []string
	for _, s := range []struct{ name, vol string }{{"s3", "vol-b"}, {"s1", "vol-a"}, {"s5", "vol-b"}, {"s2", "vol-a"}, {"s4", "vol-a"}} {
		all = append(all, e.mustSnapshot(t, s.name, s.vol).GetSnapshotId())
	}
	slices.Sort(all)
	onA := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id[:5] != "vol-a" })
	cases := []struct {
		what  string
		req   *spec.ListSnapshotsRequest
		want  []string
		pages int
	}{
		{"all, 2 per page", &spec.ListSnapshotsRequest{MaxEntries: 2}, all, 3},
		{"all, 1 per page", &spec.ListSnapshotsRequest{MaxEntries: 1}, all, 5},
		{"all at once", &spec.ListSnapshotsRequest{}, all, 1},
		{"one volume's, 2 per page", &spec.ListSnapshotsRequest{MaxEntries: 2, SourceVolumeId: "vol-a"}, onA, 2},
		{"a volume without snapshots", &spec.ListSnapshotsRequest{SourceVolumeId: "vol-c"}, nil, 1},
		{"a missing volume", &spec.ListSnapshotsRequest{SourceVolumeId: "nope"}, nil, 1},
		{"a malformed volume id", &spec.ListSnapshotsRequest{SourceVolumeId: "../../etc"}, nil, 1},
		{"one snapshot by id", &spec.ListSnapshotsRequest{SnapshotId: all[2]}, all[2:3], 1},
		{"a missing snapshot id", &spec.ListSnapshotsRequest{SnapshotId: "vol-a@nope"}, nil, 1},
		{"a snapshot id with another volume", &spec.ListSnapshotsRequest{SnapshotId: all[0], SourceVolumeId: "vol-b"}, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			got, pages := pageSnapshots(t, e, c.req)
			if !slices.Equal(got, c.want) {
				t.Fatalf("listed %q, want %q", got, c.want)
			}
			if pages != c.pages {
				t.Fatalf("%d pages, want %d", pages, c.pages)
			}
		})
	}
}

func TestListingWithATokenTheDriverDidNotHandOutIsAborted(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 3; i++ {
		e.mustCreate(t, createReq(fmt.Sprintf("vol-%d", i), 0))
	}
	e.mustSnapshot(t, "snap-1", "vol-1")
	for _, token := range []string{"bogus", "vol-1", "after/", "2", "../../etc"} {
		t.Run(token, func(t *testing.T) {
			_, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{StartingToken: token})
			wantCode(t, err, codes.Aborted)
			_, err = e.ctrl.ListSnapshots(ctx(t), &spec.ListSnapshotsRequest{StartingToken: token})
			wantCode(t, err, codes.Aborted)
		})
	}
}

func TestListingWithNegativeMaxEntriesIsInvalid(t *testing.T) {
	e := newEnv(t)
	_, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.ctrl.ListSnapshots(ctx(t), &spec.ListSnapshotsRequest{MaxEntries: -1})
	wantCode(t, err, codes.InvalidArgument)
}
