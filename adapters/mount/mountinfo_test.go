package mount

import (
	"os"
	"slices"
	"testing"
)

func TestParseMountInfoReadsMountPointSourceAndReadOnly(t *testing.T) {
	data := []byte(`43 27 0:40 / /probe rw,relatime - fuse.zfs probe rw,user_id=0
45 27 0:41 / /var/lib/kubelet/pods/x/volumes/with\040space ro,relatime shared:5 - fuse.zfs probe/ferry/pvc-1 rw,user_id=0
`)
	got, err := parseMountInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].mountPoint != "/probe" || got[0].readOnly || got[0].source != "probe" {
		t.Fatalf("first entry %+v", got)
	}
	if got[1].mountPoint != "/var/lib/kubelet/pods/x/volumes/with space" || !got[1].readOnly || got[1].source != "probe/ferry/pvc-1" {
		t.Fatalf("second entry %+v", got[1])
	}
	if _, err := parseMountInfo([]byte("garbage\n")); err == nil {
		t.Fatal("a malformed line was accepted")
	}
}

// The host's zfs, run in the host root below /host, mounts a dataset at
// /host<mountpoint>, and the same mount shows at <mountpoint>: the view
// below the host root is no other user (a remount or unpublish would
// answer busy for ever), a pod's bind mount elsewhere is.
func TestMountsBelowTheHostRootAreNotInTheTable(t *testing.T) {
	file := t.TempDir() + "/mountinfo"
	data := `43 27 0:40 / /var/lib/ferry/pvc-1 rw,relatime shared:7 - zfs tank/ferry/pvc-1 rw
44 27 0:40 / /host/var/lib/ferry/pvc-1 rw,relatime shared:7 - zfs tank/ferry/pvc-1 rw
45 27 0:40 / /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount rw,relatime shared:7 - zfs tank/ferry/pvc-1 rw
46 27 0:41 / /host rw,relatime - zfs tank/ferry/pvc-2 rw
47 27 0:42 / /hostile/var/lib/ferry/pvc-3 rw,relatime - zfs tank/ferry/pvc-3 rw
`
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	tb := Table{MountInfo: file, HostRoot: "/host"}
	got, err := tb.MountsOf("tank/ferry/pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/var/lib/ferry/pvc-1", "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount"}
	if !slices.Equal(got, want) {
		t.Errorf("MountsOf = %v, want %v", got, want)
	}
	if _, ok, _ := tb.MountAt("/host"); ok {
		t.Error("the host root itself is in the table")
	}
	if pts, _ := tb.MountsOf("tank/ferry/pvc-3"); len(pts) != 1 {
		t.Errorf("a path that only starts like the host root is hidden: %v", pts)
	}
	// Without a host root, every view is in the table.
	if pts, _ := (Table{MountInfo: file}).MountsOf("tank/ferry/pvc-1"); len(pts) != 3 {
		t.Errorf("no host root: %v", pts)
	}
}
