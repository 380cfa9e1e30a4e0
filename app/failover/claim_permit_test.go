package failover

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// A publish's claim waits for this daemon's first permit, and
// acknowledges a taker under the same rule as the guard's acknowledgement (the lease held, the permit bounding the volume
// first); refused that, it still resumes the term, so the pod is not held
// back, and the copy waits for the guard's acknowledgement.
func TestAClaimAcknowledgesATakerOnlyOnceThePermitBoundsItsVolume(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	clock := &fakeClock{}
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, unackedState("single")); err != nil {
		t.Fatal(err)
	}
	lease := mocks.NewMockNodeLease(ctrl)
	vols := NewVolumes()
	vols.Saw(unackedState("single"))
	takers := NewTakers("a", cluster, zap.NewNop())
	box := &permitBox{}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, takers, mocks.NewMockSnapshotStore(ctrl),
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))

	// No permit published by this daemon yet (no renewal answered since
	// it started): the claim is refused, nothing written (the pod waits:
	// an upgraded volume manager's watchdog arms only on a permit).
	if err := takers.Claim(ctx, "single"); !errors.Is(err, errNoPermitYet) {
		t.Fatalf("claimed before the node's permit was published: %v", err)
	}
	if st, _ := cluster.Get(ctx, "single"); st.Replicas[0].Resumed != 0 {
		t.Fatalf("resumed %d times before the permit was published", st.Replicas[0].Resumed)
	}

	// A renewal answered but refused: the permit is published (the lease
	// passed) with the claim, which resumes the term; nobody acknowledged.
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	if err := takers.Claim(ctx, "single"); err != nil {
		t.Fatal(err)
	}
	if box.count() == 0 {
		t.Fatal("claimed, no permit published")
	}
	st, _ := cluster.Get(ctx, "single")
	if st.Replicas[1].Taker || st.Replicas[0].Resumed != 1 {
		t.Fatalf("claimed without the lease: b a taker %v, resumed %d times (want false, 1)", st.Replicas[1].Taker, st.Replicas[0].Resumed)
	}
	if len(takers.Of("single")) != 0 {
		t.Fatalf("the ledger records takers %v nobody acknowledged", takers.Of("single"))
	}

	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := box.last(t).Deadline("single"); d != liveness.Forever {
		t.Fatalf("single, nobody acknowledged, may write until %s", d)
	}
	box.mu.Lock()
	bounded := false
	box.seen = func(p liveness.Permit) {
		st, _ := cluster.Get(ctx, "single")
		if bounded || p.Deadline("single") == liveness.Forever {
			return
		}
		bounded = true
		if st.Replicas[1].Taker {
			t.Errorf("single was bounded (%s) only after b was flagged a taker", p.Deadline("single"))
		}
	}
	box.mu.Unlock()
	if err := takers.Claim(ctx, "single"); err != nil {
		t.Fatal(err)
	}
	st, _ = cluster.Get(ctx, "single")
	if !st.Replicas[1].Taker || !bounded || st.Replicas[0].Resumed != 2 {
		t.Fatalf("b acknowledged: %v; single bounded first: %v; resumed %d times (want 2)", st.Replicas[1].Taker, bounded, st.Replicas[0].Resumed)
	}
	if d := box.last(t).Deadline("single"); d != timing.Held(0) {
		t.Fatalf("single may write until %s after its claim, want the lease's end %s", d, timing.Held(0))
	}
}
