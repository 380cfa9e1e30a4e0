package csi_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

const goodKey = "correct horse battery"

func TestCreateVolumeOfAnEncryptedClassRefusesBadInputWithInvalidArgumentAndCreatesNothing(t *testing.T) {
	cases := []struct {
		what    string
		params  map[string]string
		secrets map[string]string
		named   string
	}{
		{"an unknown cipher", map[string]string{"encryption": "des"}, map[string]string{"key": goodKey}, "encryption"},
		{"a key format without encryption", map[string]string{"keyformat": "raw"}, nil, "keyformat"},
		{"no provisioner Secret", map[string]string{"encryption": "on"}, nil, "secrets.key"},
		{"a Secret without the key field", map[string]string{"encryption": "on"}, map[string]string{"passphrase": goodKey}, "secrets.key"},
		{"a passphrase too short", map[string]string{"encryption": "on"}, map[string]string{"key": "seven77"}, "secrets.key"},
		{"a raw key of 31 bytes", map[string]string{"encryption": "on", "keyformat": "raw"}, map[string]string{"key": strings.Repeat("r", 31)}, "secrets.key"},
		{"a hex key not hex", map[string]string{"encryption": "on", "keyformat": "hex"}, map[string]string{"key": strings.Repeat("z", 64)}, "secrets.key"},
		{"a pool that cannot encrypt", map[string]string{"encryption": "on"}, map[string]string{"key": goodKey}, "cannot encrypt"},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			req := createReq("vol-1", 0)
			req.Parameters, req.Secrets = c.params, c.secrets
			_, err := e.ctrl.CreateVolume(ctx(t), req)
			wantCode(t, err, codes.InvalidArgument)
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, c.named) {
				t.Errorf("message %q does not name %q", msg, c.named)
			}
			for _, v := range c.secrets {
				if len(v) > 3 && strings.Contains(msg, v) {
					t.Fatalf("the message shows the key: %q", msg)
				}
			}
			e.assertNothingCreated(t)
		})
	}
}

// encryptedStore shows every volume as one Ferry encrypted, its key not
// loaded (a secondary's copy), and loads only goodKey; a loaded key mounts
// the dataset at its mountpoint in mounter unless noMount.
type encryptedStore struct {
	*memstore.Store
	mu      sync.Mutex
	loaded  bool
	tried   []string
	mounter *fakeMounter
	noMount bool
}

func (s *encryptedStore) GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error) {
	info, err := s.Store.GetVolume(ctx, id)
	if err != nil {
		return info, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	info.Metadata = map[string]string{ports.MetaEncryption: "aes-256-gcm/passphrase"}
	info.Encryption = volume.Stored{Known: true, Cipher: "aes-256-gcm", OwnRoot: true, KeyFormat: volume.KeyPassphrase, KeyLoaded: s.loaded}
	return info, nil
}

func (s *encryptedStore) LoadKey(_ context.Context, id volume.ID, key volume.Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tried = append(s.tried, string(key.Bytes()))
	if string(key.Bytes()) != goodKey {
		return ports.ErrKeyRejected
	}
	s.loaded = true
	if s.mounter != nil && !s.noMount {
		info, err := s.Store.GetVolume(context.Background(), id)
		if err != nil {
			return err
		}
		s.mounter.mu.Lock()
		s.mounter.mounts[info.MountPath] = ports.Mount{Source: info.MountSource}
		s.mounter.mu.Unlock()
	}
	return nil
}

func TestNodePublishOfAnEncryptedVolumeNeedsItsKeyAndAWrongKeyChangesNothing(t *testing.T) {
	enc := &encryptedStore{}
	e := newEnv(t, func(m *memstore.Store) ports.SnapshotStore { enc.Store = m; return enc })
	enc.mounter = e.mount
	e.mustCreate(t, createReq("vol-1", 0))
	publish := func(secrets map[string]string) error {
		_, err := e.node.NodePublishVolume(ctx(t), &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target, VolumeCapability: rwCap(), Secrets: secrets})
		return err
	}
	cases := []struct {
		what    string
		secrets map[string]string
		code    codes.Code
	}{
		{"no node-publish Secret", nil, codes.InvalidArgument},
		{"a Secret without the key field", map[string]string{"passphrase": goodKey}, codes.InvalidArgument},
		{"a key too long", map[string]string{"key": strings.Repeat("k", 513)}, codes.InvalidArgument},
		{"a wrong key", map[string]string{"key": "wrong horse battery"}, codes.FailedPrecondition},
	}
	for _, c := range cases {
		err := publish(c.secrets)
		wantCode(t, err, c.code)
		if msg := status.Convert(err).Message(); strings.Contains(msg, "horse") {
			t.Fatalf("%s: the message shows a key: %q", c.what, msg)
		}
		if mounts, _ := e.mount.snapshot(); len(mounts) != 0 {
			t.Fatalf("%s: mounted %v", c.what, mounts)
		}
	}
	if len(enc.tried) != 1 {
		t.Fatalf("keys tried: %d, want only the well-formed wrong one", len(enc.tried))
	}
	if err := publish(map[string]string{"key": goodKey}); err != nil {
		t.Fatalf("publish with the right key: %v", err)
	}
	if mounts, _ := e.mount.snapshot(); len(mounts) != 2 {
		t.Fatalf("mounts %v, want the dataset and the target", mounts)
	}
	// With the key loaded now (the node that created the volume), the
	// Secret is still required and still checked.
	_, err := e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
	if err != nil {
		t.Fatal(err)
	}
	enc.mu.Lock()
	enc.loaded, enc.tried = true, nil
	enc.mu.Unlock()
	wantCode(t, publish(nil), codes.InvalidArgument)
	wantCode(t, publish(map[string]string{"key": "wrong horse battery"}), codes.FailedPrecondition)
	if len(enc.tried) != 1 {
		t.Fatalf("keys tried with the key loaded: %d, want the wrong one checked", len(enc.tried))
	}
	if mounts, _ := e.mount.snapshot(); func() bool { _, ok := mounts[target]; return ok }() {
		t.Fatalf("a wrong Secret on a node with the key loaded was published: %v", mounts)
	}
}

// The dataset of an encrypted volume must be mounted at its mountpoint
// before the bind mount: a bare mountpoint directory is never published.
func TestNodePublishOfAnEncryptedVolumeNeverBindsAnUnmountedDataset(t *testing.T) {
	enc := &encryptedStore{noMount: true}
	e := newEnv(t, func(m *memstore.Store) ports.SnapshotStore { enc.Store = m; return enc })
	enc.mounter = e.mount
	e.mustCreate(t, createReq("vol-1", 0))
	_, err := e.node.NodePublishVolume(ctx(t), &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target, VolumeCapability: rwCap(),
		Secrets: map[string]string{"key": goodKey}})
	wantCode(t, err, codes.FailedPrecondition)
	if mounts, binds := e.mount.snapshot(); len(mounts) != 0 || binds != 0 {
		t.Fatalf("bound %v (%d binds) over an unmounted dataset", mounts, binds)
	}
}
