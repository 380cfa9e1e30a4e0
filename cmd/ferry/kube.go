package main

import (
	"context"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/eventlog"
	"github.com/ferry-csi/ferry/adapters/kube/claims"
	kubeevents "github.com/ferry-csi/ferry/adapters/kube/events"
	"github.com/ferry-csi/ferry/adapters/kube/lostnode"
	"github.com/ferry-csi/ferry/adapters/kube/nodelabels"
	"github.com/ferry-csi/ferry/adapters/kube/peerdir"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/adapters/kube/workload"
	"github.com/ferry-csi/ferry/adapters/nodefence"
	"github.com/ferry-csi/ferry/adapters/permitfile"
	"github.com/ferry-csi/ferry/adapters/replicactl"
	"github.com/ferry-csi/ferry/app/failover"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// daemonKube runs the daemon's Kubernetes duties when --cluster-state is
// kubernetes: the node's Lease with its peer address (--peer-advertise);
// every --placement-period, a volume manager for each listed local copy
// and the size of the workloads of volumes whose primary is here (with
// --replica-template), then the node's placement labels.
func daemonKube(lc fx.Lifecycle, o *Options, store ports.SnapshotStore, lock ports.WriteLock, mounts ports.MountTable, fencer ports.Fencer, relay *promiseRelay, events ports.EventRecorder, takers *failover.Takers, prep failover.Preparer, log *zap.Logger) error {
	if o.ClusterState != "kubernetes" {
		return nil
	}
	kube, dyn, err := kubeClients(o, "daemon")
	if err != nil {
		return err
	}
	node := replica.Node(o.NodeID)
	states := rvstate.New(dyn, nil)
	labeler := orchestration.NewLabeler(node, store, states, nodelabels.New(kube), log.Named("placement"))
	var adopter *orchestration.Adopter
	replicas := "" // the replica pods' namespace: none without a template
	if o.ReplicaTemplate != "" {
		tpl, err := workload.LoadTemplate(o.ReplicaTemplate)
		if err != nil {
			return err
		}
		replicas = tpl.Namespace
		leave := func(ctx context.Context, id volume.ID) error {
			return replication.LeaveHere(ctx, node, id, store, states, events, log.Named("adopt"))
		}
		adopter = orchestration.NewAdopter(node, store, states, workload.New(kube, dyn, tpl), leave, log.Named("adopt"))
	}
	// Node loss: the Guard renews the node's Lease (liveness and peer
	// address) and fences the primaries here when it cannot; the Survivor
	// takes lost nodes' volumes over.
	fcfg := failover.Config{Node: node, Lease: o.leaseConfig(), Lag: o.AllowedLag}
	if o.FenceNodeCommand != "" {
		fcfg.FenceNode = nodefence.Command{Path: o.FenceNodeCommand}
	}
	clock := failover.MonotonicClock()
	vols := failover.NewVolumes()
	var guard *failover.Guard
	var survivor *failover.Survivor
	if takers != nil {
		pub := peerdir.NewPublisher(kube, o.Namespace, node, o.PeerAdvertise)
		pub.Duration = o.LeaseDuration
		effects := lostnode.New(kube, o.DriverName, replicas)
		guard = failover.NewGuard(fcfg, clock, pub, vols, takers, store, mounts, fencer, effects, events, log.Named("guard"))
		survivor = failover.NewSurvivor(fcfg, clock, peerdir.NewLeases(kube, o.Namespace), states, vols, store,
			effects, events, log.Named("survivor"))
		// A copy taken over here is remounted at once, while the lost
		// node's pods are rescheduled, not when the new pod's publish
		// comes.
		survivor.PrepareWith(prep)
		relay.set(survivor.Promise)
		// Promises are asked for at the peer addresses the leases last
		// published: they matter when the API server cannot be read.
		asker, err := promiseClient(o, survivor.PeerAddress)
		if err != nil {
			return err
		}
		guard.AskPromises(asker)
		// The guard's verdicts, for the volume managers' watchdogs: they
		// fence their primaries on them when this daemon is down.
		if o.ReplicaControl != "" {
			permits := permitfile.New(o.ReplicaControl, node, permitfile.Options{})
			guard.PublishPermits(permits, permits, lock)
		}
		lc.Append(fx.Hook{OnStop: func(context.Context) error { return asker.Close() }})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 4)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if guard != nil {
				go func() {
					defer func() { done <- struct{}{} }()
					guard.Run(ctx)
				}()
				go func() {
					defer func() { done <- struct{}{} }()
					survivor.Run(ctx)
				}()
				log.Info("renewing the node's lease with its peer address", zap.String("address", o.PeerAdvertise), zap.String("lease", o.Namespace+"/"+peerdir.LeaseName(node)),
					zap.Duration("renew", o.LeaseRenew), zap.Duration("duration", o.LeaseDuration), zap.Duration("margin", o.LeaseMargin))
			} else {
				done <- struct{}{}
				done <- struct{}{}
			}
			go func() {
				// Immediate claims: every daemon selects the same node for
				// each (orchestration.Binder), no leader.
				defer func() { done <- struct{}{} }()
				cl, err := claims.Start(ctx, kube, o.DriverName, csi.TopologyKey)
				if err != nil {
					if ctx.Err() == nil {
						log.Error("Immediate claims will not be placed", zap.Error(err))
					}
					return
				}
				orchestration.NewBinder(cl, log.Named("bind")).Run(ctx, o.PlacementPeriod)
			}()
			go func() {
				defer func() { done <- struct{}{} }()
				// The feed keeps the Guard's view (every change, none
				// dropped; a slow reader gets each volume's newest). The
				// view is updated first, and nothing here waits: the
				// labeler's work runs in this goroutine's loop below,
				// woken by a coalesced kick. A volume becoming usable here
				// or not (a release, a promotion, a replica turning ready)
				// places the node at once: a pod moving here waits for the
				// label.
				kick := make(chan struct{}, 1)
				if feed, err := states.Feed(ctx); err != nil {
					log.Warn("placement labels follow the volumes' states only every --placement-period", zap.Error(err))
				} else {
					go func() {
						for c := range feed {
							vols.Apply(c)
							if c.Gone && takers != nil {
								takers.Forget(c.Volume) // deleted: no term of it here
							}
							if labeler.ChangedBy(c) {
								select {
								case kick <- struct{}{}:
								default:
								}
							}
						}
					}()
				}
				t := time.NewTicker(o.PlacementPeriod)
				defer t.Stop()
				full := true
				for {
					if adopter != nil && full {
						if _, err := adopter.Sync(ctx); err != nil && ctx.Err() == nil {
							log.Warn("local copies not all running", zap.Error(err))
						}
					}
					if usable, err := labeler.Sync(ctx); err != nil && ctx.Err() == nil {
						log.Warn("placement labels not updated", zap.Error(err))
					} else if err == nil {
						log.Debug("placement labels checked", zap.Int("usable", len(usable)))
					}
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						full = true
					case <-kick:
						full = false
					}
				}
			}()
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			for range cap(done) {
				<-done
			}
			return nil
		},
	})
	return nil
}

// enableReplication lets the node's controller service replicate volumes
// of factor 2 or more (--replica-template): ReplicatedVolumes, replica
// pods from the template, ReplicaSets and budgets.
func enableReplication(o *Options, ctrl *provision.Service, events ports.EventRecorder) error {
	if o.ReplicaTemplate == "" {
		return nil
	}
	tpl, err := workload.LoadTemplate(o.ReplicaTemplate)
	if err != nil {
		return err
	}
	kube, dyn, err := kubeClients(o, "controller")
	if err != nil {
		return err
	}
	ctrl.EnableReplication(rvstate.New(dyn, nil), workload.New(kube, dyn, tpl))
	ctrl.RecordEvents(events)
	return nil
}

// eventRecorder is where a component's events go: with --cluster-state
// kubernetes, Kubernetes Events on the volume's ReplicatedVolume and, with
// claims, on its claim too (the daemon's ServiceAccount may read claims,
// the volume managers' may not), besides the log; otherwise the log alone.
// The recorder starts before and stops after whatever fx builds with it.
func eventRecorder(lc fx.Lifecycle, o *Options, log *zap.Logger, component string, claims bool) (ports.EventRecorder, error) {
	log = log.Named("events")
	if o.ClusterState != "kubernetes" {
		return eventlog.Recorder{Log: log}, nil
	}
	kube, dyn, err := kubeClients(o, component)
	if err != nil {
		return nil, err
	}
	r := kubeevents.New(kube, dyn, log, kubeevents.Options{Host: o.NodeID, Claims: claims})
	lc.Append(fx.Hook{OnStart: r.Start, OnStop: r.Stop})
	return r, nil
}

// leaseResolver resolves peers from the nodes' Leases (volume-manager with
// --cluster-state kubernetes and no --peers).
func leaseResolver(o *Options) (func(replica.Node) (string, error), error) {
	kube, _, err := kubeClients(o, "volume-manager")
	if err != nil {
		return nil, err
	}
	return peerdir.NewResolver(kube, o.Namespace, 30*time.Second).Resolve, nil
}

// kubeClients are the typed and dynamic API clients of a component.
func kubeClients(o *Options, component string) (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := kubeConfig(o.Kubeconfig, component)
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kube, dyn, nil
}

// nodeReplication lets the node plugin hand replicated volumes over
// (--replica-template with --cluster-state kubernetes): publish and
// unpublish reach this node's volume managers through their control
// sockets in --replica-control-dir.
func nodeReplication(o *Options, n *publish.Service, lock ports.WriteLock, events ports.EventRecorder, takers *failover.Takers) error {
	if o.ClusterState != "kubernetes" || o.ReplicaTemplate == "" || o.ReplicaControl == "" {
		return nil
	}
	tpl, err := workload.LoadTemplate(o.ReplicaTemplate)
	if err != nil {
		return err
	}
	kube, dyn, err := kubeClients(o, "node")
	if err != nil {
		return err
	}
	r := publish.Replication{
		Cluster:   rvstate.New(dyn, nil),
		Control:   replicactl.NewClient(o.ReplicaControl, replica.Node(o.NodeID)),
		Workload:  workload.New(kube, dyn, tpl),
		Events:    events,
		Wait:      o.HandoverWait,
		WriteLock: lock,
	}
	if takers != nil {
		r.Takers = takers
	}
	n.EnableReplication(r)
	return nil
}

// daemonTakers are the node's acknowledged takers (failover.Takers) when
// it takes part in node-loss failover (--cluster-state kubernetes with
// --peer-advertise: a lease, a guard and a survivor); nil otherwise.
func daemonTakers(o *Options, log *zap.Logger) (*failover.Takers, error) {
	if o.ClusterState != "kubernetes" || o.PeerAdvertise == "" {
		return nil, nil
	}
	_, dyn, err := kubeClients(o, "takers")
	if err != nil {
		return nil, err
	}
	return failover.NewTakers(replica.Node(o.NodeID), rvstate.New(dyn, nil), log.Named("takers")), nil
}
