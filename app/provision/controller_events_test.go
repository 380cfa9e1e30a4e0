package provision_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// heard collects the events a controller raises.
type heard struct {
	mu  sync.Mutex
	got []ports.Event
}

func (h *heard) Record(_ context.Context, _ volume.ID, e ports.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, e)
}

func (h *heard) all() []ports.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ports.Event(nil), h.got...)
}

// Setting up replication tells the operator what it did, and each step
// that fails says so with its error (CreateVolume fails and is retried).
func TestReplicatingAVolumeRaisesAnEventAndAWarningForAFailedStep(t *testing.T) {
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl)
	h := &heard{}
	c := provision.New(cfg, memstore.New(t.TempDir(), 1<<30, 1), noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: fakecluster.New(), Workload: w, Events: h}))
	req := provision.CreateVolumeRequest{Name: "pvc-e", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "3"}}

	w.EXPECT().StartReplica(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any(), true).Return(nil).Times(2)
	gomock.InOrder(
		w.EXPECT().Apply(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).Return(errors.New("replicasets.apps is forbidden")),
		w.EXPECT().Apply(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).Return(nil),
	)
	w.EXPECT().Segment(gomock.Any()).Return("replica.ferry.zfs.csi.io/pvc-e", "ready")
	if _, err := c.CreateVolume(ctx, req); err == nil {
		t.Fatal("CreateVolume succeeded with the ReplicaSet not applied")
	}
	got := h.all()
	if len(got) != 1 || got[0].Type != ports.EventWarning || got[0].Reason != provision.ReasonWorkloadFailed || !strings.Contains(got[0].Message, "replicasets.apps is forbidden") {
		t.Fatalf("events after a failed step: %+v, want one warning with the error", got)
	}
	if _, err := c.CreateVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	got = h.all()
	if len(got) != 2 || got[1].Type != ports.EventNormal || got[1].Reason != provision.ReasonReplicasRequested ||
		!strings.Contains(got[1].Message, "3 copies") || !strings.Contains(got[1].Message, "node-1 holds the primary") {
		t.Fatalf("events after the retry: %+v, want ReplicasRequested naming 3 copies and node-1 the primary", got)
	}
}

// A shared state that cannot be written is a warning too.
func TestAFailedSharedStateIsAWarning(t *testing.T) {
	ctrl := gomock.NewController(t)
	states := mocks.NewMockClusterState(ctrl)
	states.EXPECT().Create(gomock.Any(), gomock.Any()).Return(replica.State{}, ports.ErrUnavailable)
	h := &heard{}
	c := provision.New(cfg, memstore.New(t.TempDir(), 1<<30, 1), noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Workload: mocks.NewMockReplicaWorkload(ctrl), Events: h}))
	if _, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "pvc-f", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "2"}}); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("CreateVolume: %v, want ErrUnavailable", err)
	}
	if got := h.all(); len(got) != 1 || got[0].Type != ports.EventWarning || got[0].Reason != provision.ReasonStateFailed {
		t.Fatalf("events: %+v, want one %s warning", got, provision.ReasonStateFailed)
	}
}
