package app_test

import (
	"testing"

	"go.uber.org/mock/gomock"

	"github.com/ferry-csi/ferry/app"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

func TestLocalReplicaIsTheNewestReplicationSnapshotAndItsEpoch(t *testing.T) {
	store := mocks.NewMockSnapshotStore(gomock.NewController(t))
	m := app.NewVolumeManager(cfg, "v", store)
	store.EXPECT().ListSnapshots(gomock.Any(), gomock.Any()).Return([]ports.SnapshotInfo{
		{Name: "ferry-2", Metadata: map[string]string{ports.MetaEpoch: "1"}},
		{Name: "ferry-10", Metadata: map[string]string{ports.MetaEpoch: "3"}},
		{Name: "csi-ferry-99"},
		{Name: "ferry-7", Metadata: map[string]string{ports.MetaEpoch: "2"}},
	}, nil)
	r, err := m.LocalReplica(ctx)
	if err != nil || r.Snapshot != 10 || r.SnapshotEpoch != 3 || r.Node != "node-1" {
		t.Fatalf("replica = %+v, %v; want snapshot 10 of epoch 3 on node-1", r, err)
	}
	store.EXPECT().ListSnapshots(gomock.Any(), gomock.Any()).Return(nil, notFound("v"))
	r, err = m.LocalReplica(ctx)
	if err != nil || r.Snapshot != 0 {
		t.Fatalf("no data: %+v, %v; want snapshot 0", r, err)
	}
}
