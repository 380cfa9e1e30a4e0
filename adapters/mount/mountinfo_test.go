package mount

import "testing"

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
