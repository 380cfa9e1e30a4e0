package csi_test

import (
	"strings"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostileNames are names no volume or snapshot may be created under: each
// would escape the pool's parent dataset, the store's directory, or a
// shell, or flood logs.
var hostileNames = []struct{ what, name string }{
	{"path traversal", "../../etc"},
	{"a path separator", "a/b"},
	{"a ZFS snapshot separator", "vol@snap"},
	{"a command substitution", "$(reboot)"},
	{"a command separator", "a;rm -rf /"},
	{"backticks", "`id`"},
	{"a 10 KB name", strings.Repeat("x", 10*1024)},
	{"the empty name", ""},
	{"a NUL byte", "vol\x00ume"},
	{"a leading dot", ".hidden"},
	{"a space", "with space"},
	{"a newline", "vol\nume"},
	{"a leading dash", "-rf"},
	{"a ZFS bookmark separator", "vol#mark"},
	{"one byte beyond 128", strings.Repeat("a", 129)},
}

func TestCreateVolumeRefusesHostileNamesWithInvalidArgumentAndCreatesNothing(t *testing.T) {
	for _, c := range hostileNames {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.ctrl.CreateVolume(ctx(t), createReq(c.name, 0))
			wantCode(t, err, codes.InvalidArgument)
			if msg := status.Convert(err).Message(); len(msg) > 1024 {
				t.Errorf("the error message is %d bytes long: hostile input must not flood logs", len(msg))
			}
			e.assertNothingCreated(t)
		})
	}
}

func TestCreateVolumeAcceptsAName128BytesLong(t *testing.T) {
	e := newEnv(t)
	name := strings.Repeat("a", 128)
	if v := e.mustCreate(t, createReq(name, 0)); v.GetVolumeId() != name {
		t.Fatalf("volume_id = %q, want the name", v.GetVolumeId())
	}
}

func TestCreateSnapshotRefusesHostileNamesWithInvalidArgumentAndTakesNothing(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	for _, c := range hostileNames {
		t.Run(c.what, func(t *testing.T) {
			_, err := e.ctrl.CreateSnapshot(ctx(t), &spec.CreateSnapshotRequest{Name: c.name, SourceVolumeId: "vol-1"})
			wantCode(t, err, codes.InvalidArgument)
			if ids := e.snapshotIDs(t); len(ids) != 0 {
				t.Fatalf("ListSnapshots = %q, want none", ids)
			}
		})
	}
}

func TestDeleteCallsWithHostileIDsSucceedAndDeleteNothing(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	e.mustSnapshot(t, "snap-1", "vol-1")
	hostileIDs := []string{"../../etc", "vol-1/..", "vol-1/../vol-1", "$(reboot)", "vol-1;rm -rf /", strings.Repeat("x", 10*1024), "vol-1\x00"}
	for _, id := range hostileIDs {
		t.Run("volume "+short(id), func(t *testing.T) {
			_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: id})
			wantCode(t, err, codes.OK)
		})
		t.Run("snapshot "+short(id), func(t *testing.T) {
			_, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: id})
			wantCode(t, err, codes.OK)
			_, err = e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: "vol-1@" + id})
			wantCode(t, err, codes.OK)
		})
	}
	if ids := e.volumeIDs(t); len(ids) != 1 || ids[0] != "vol-1" {
		t.Fatalf("volumes after hostile deletes = %q, want [vol-1]", ids)
	}
	if ids := e.snapshotIDs(t); len(ids) != 1 || ids[0] != "vol-1@snap-1" {
		t.Fatalf("snapshots after hostile deletes = %q, want [vol-1@snap-1]", ids)
	}
}

func TestNodePublishRefusesHostileVolumeIDsAndTargetsWithoutMounting(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	cases := []struct{ what, id, target string }{
		{"a traversing volume id", "../../etc", "/pods/1/mount"},
		{"a volume id with a slash", "vol-1/x", "/pods/1/mount"},
		{"a volume id with shell", "$(reboot)", "/pods/1/mount"},
		{"a relative target", "vol-1", "pods/1/mount"},
		{"a dot-relative target", "vol-1", "../../etc"},
		{"a target beyond 4096 bytes", "vol-1", "/" + strings.Repeat("p", 5000)},
		{"a NUL byte in the target", "vol-1", target + "\x00/x"},
		{"a traversing target below the kubelet dir", "vol-1", "/var/lib/kubelet/pods/../../../etc"},
		{"a target outside the kubelet dir", "vol-1", "/etc/ferry"},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			_, err := e.node.NodePublishVolume(ctx(t), &spec.NodePublishVolumeRequest{VolumeId: c.id, TargetPath: c.target, VolumeCapability: rwCap()})
			wantCode(t, err, codes.InvalidArgument)
			if mounts, _ := e.mount.snapshot(); len(mounts) != 0 {
				t.Fatalf("mounts = %v, want none", mounts)
			}
		})
	}
}

func TestCreateVolumeRefusesBadParametersWithInvalidArgumentNamingTheParameter(t *testing.T) {
	cases := []struct {
		what   string
		params map[string]string
		named  string // the parameter the message must name
	}{
		{"an unknown parameter", map[string]string{"bogus": "1"}, "bogus"},
		{"a key with a typo", map[string]string{"replicationfactor": "2"}, "replicationfactor"},
		{"a ZFS property not on the allow-list", map[string]string{"mountpoint": "/etc"}, "mountpoint"},
		{"a quota by the back door", map[string]string{"quota": "1T"}, "quota"},
		{"a replication factor of zero", map[string]string{"defaultReplicationFactor": "0"}, "defaultReplicationFactor"},
		{"a replication factor in words", map[string]string{"defaultReplicationFactor": "two"}, "defaultReplicationFactor"},
		{"an unknown compression", map[string]string{"compression": "bogus"}, "compression"},
		{"a recordsize that is not a power of two", map[string]string{"recordsize": "100k"}, "recordsize"},
		{"an atime of yes", map[string]string{"atime": "yes"}, "atime"},
		{"a snapshot interval of garbage", map[string]string{"snapshotInterval": "soon"}, "snapshotInterval"},
		{"a pool with a slash", map[string]string{"pool": "ferry/evil"}, "pool"},
		{"a pool this driver does not serve", map[string]string{"pool": "tank"}, "pool"},
		{"one bad key among good ones", map[string]string{"compression": "lz4", "mountpoint": "/", "atime": "off"}, "mountpoint"},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			req := createReq("vol-1", 0)
			req.Parameters = c.params
			_, err := e.ctrl.CreateVolume(ctx(t), req)
			wantCode(t, err, codes.InvalidArgument)
			if msg := status.Convert(err).Message(); !strings.Contains(msg, c.named) {
				t.Errorf("message %q does not name the parameter %q", msg, c.named)
			}
			e.assertNothingCreated(t)
		})
	}
}

func TestCreateVolumeAcceptsEveryAllowedParameter(t *testing.T) {
	e := newEnv(t)
	req := createReq("vol-1", 0)
	req.Parameters = map[string]string{
		"defaultReplicationFactor": "3", "pool": poolName, "snapshotInterval": "1m",
		"compression": "lz4", "recordsize": "128k", "atime": "off",
		"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db",
	}
	v := e.mustCreate(t, req)
	if got := v.GetVolumeContext()["replicationFactor"]; got != "3" {
		t.Fatalf("volume_context replicationFactor = %q, want 3", got)
	}
}
