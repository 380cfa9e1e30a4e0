package volume

import "testing"

func TestMayDeleteRefusesAVolumeAnySourceShowsInUse(t *testing.T) {
	cases := []struct {
		what string
		use  Use
		want DeleteVerdict
	}{
		{"nothing known", Use{}, DeleteVerdict{Block: DeleteAllowed}},
		{"mounted for a pod", Use{Mounts: []string{"/var/lib/kubelet/pods/b/mount", "/var/lib/kubelet/pods/a/mount"}},
			DeleteVerdict{Block: DeleteBlockedMounted, Evidence: "/var/lib/kubelet/pods/a/mount"}},
		{"an active primary elsewhere", Use{ActivePrimary: "node-2"}, DeleteVerdict{Block: DeleteBlockedActivePrimary, Evidence: "node-2"}},
		{"both: the mount is the evidence", Use{Mounts: []string{"/p"}, ActivePrimary: "node-2"}, DeleteVerdict{Block: DeleteBlockedMounted, Evidence: "/p"}},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			got := MayDelete(c.use)
			if got != c.want {
				t.Fatalf("MayDelete(%+v) = %+v (%s), want %+v", c.use, got, got, c.want)
			}
			if got.Allowed() != (c.want.Block == DeleteAllowed) {
				t.Fatalf("Allowed() = %v for %s", got.Allowed(), got)
			}
		})
	}
}
