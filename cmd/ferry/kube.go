package main

import (
	"context"

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
func daemonKube(lc fx.Lifecycle, o *Options, api *kubeAPI, store ports.SnapshotStore, lock ports.WriteLock, mounts ports.MountTable, fencer ports.Fencer, relay *promiseRelay, events ports.EventRecorder, takers *failover.Takers, prep failover.Preparer, log *zap.Logger) error {
	if api == nil {
		return nil
	}
	kube, states := api.kube, api.states
	node := replica.Node(o.NodeID)
	labeler := orchestration.NewLabeler(node, store, states, nodelabels.New(kube), log.Named("placement"))
	var adopter *orchestration.Adopter
	if api.workload != nil {
		leave := func(ctx context.Context, id volume.ID) error {
			return replication.LeaveHere(ctx, node, id, store, states, events, log.Named("adopt"))
		}
		adopter = orchestration.NewAdopter(node, store, states, api.workload, leave, log.Named("adopt"))
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
		effects := lostnode.New(kube, o.DriverName, api.replicas)
		// A copy taken over here is remounted at once, while the lost
		// node's pods are rescheduled, not when the new pod's publish
		// comes.
		survivor = failover.NewSurvivor(fcfg, clock, peerdir.NewLeases(kube, o.Namespace), states, vols, store,
			effects, events, log.Named("survivor"), failover.WithPreparer(prep))
		relay.set(survivor.Promise)
		// Promises are asked for at the peer addresses the leases last
		// published: they matter when the API server cannot be read.
		asker, err := promiseClient(o.PeerOptions, survivor.PeerAddress)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStop: func(context.Context) error { return asker.Close() }})
		opts := []failover.GuardOption{failover.WithPromises(asker)}
		// The guard's verdicts, for the volume managers' watchdogs: they
		// fence their primaries on them when this daemon is down.
		if o.ReplicaControl != "" {
			permits := permitfile.New(o.ReplicaControl, node, permitfile.Options{})
			opts = append(opts, failover.WithPermits(permits, permits, lock))
		}
		guard = failover.NewGuard(fcfg, clock, pub, vols, takers, store, mounts, fencer, effects, events, log.Named("guard"), opts...)
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
				// dropped; a slow reader gets each volume's newest),
				// updated before the placement's own work.
				forget := func(c ports.StateChange) {
					if c.Gone && takers != nil {
						takers.Forget(c.Volume) // deleted: no term of it here
					}
				}
				p := &orchestration.Placement{Labeler: labeler, Adopter: adopter, Feed: states,
					Listeners: []func(ports.StateChange){vols.Apply, forget}, Period: o.PlacementPeriod, Log: log.Named("placement")}
				p.Run(ctx)
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

// controllerReplication lets the node's controller service replicate
// volumes of factor 2 or more (--replica-template): ReplicatedVolumes,
// replica pods from the template, ReplicaSets and budgets.
func controllerReplication(api *kubeAPI, events ports.EventRecorder) []provision.Option {
	if api == nil || api.workload == nil {
		return nil
	}
	return []provision.Option{provision.WithReplication(provision.Replication{Cluster: api.states, Specs: api.states, Workload: api.workload, Events: events})}
}

// eventRecorder is where a component's events go: with --cluster-state
// kubernetes, Kubernetes Events on the volume's ReplicatedVolume and, with
// claims, on its claim too (the daemon's ServiceAccount may read claims,
// the volume managers' may not), besides the log; otherwise the log alone.
// The recorder starts before and stops after whatever fx builds with it.
func eventRecorder(lc fx.Lifecycle, o *Options, api *kubeAPI, log *zap.Logger, claims bool) (ports.EventRecorder, error) {
	log = log.Named("events")
	if api == nil {
		return eventlog.Recorder{Log: log}, nil
	}
	r := kubeevents.New(api.kube, api.dyn, log, kubeevents.Options{Host: o.NodeID, Claims: claims})
	lc.Append(fx.Hook{OnStart: r.Start, OnStop: r.Stop})
	return r, nil
}

// kubeAPI is a process's one Kubernetes client set, with --cluster-state
// kubernetes (nil otherwise), and what is built on it once: the
// ReplicatedVolumes' store and, with --replica-template, the replica
// workload (its pods' namespace in replicas).
type kubeAPI struct {
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	states   *rvstate.Store
	workload *workload.Applier
	replicas string
}

// newKubeAPI builds the process's client set, its user agent naming the
// mode, and loads the replica template once.
func newKubeAPI(o KubeOptions, replicaTemplate string, lag uint64, mode string) (*kubeAPI, error) {
	if o.ClusterState != "kubernetes" {
		return nil, nil
	}
	cfg, err := kubeConfig(o.Kubeconfig, mode)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := &kubeAPI{kube: kube, dyn: dyn, states: rvstate.New(dyn, nil)}
	if replicaTemplate != "" {
		tpl, err := workload.LoadTemplate(replicaTemplate)
		if err != nil {
			return nil, err
		}
		tpl.AllowedLag = lag // the volume managers count the lag the survivors do
		api.workload, api.replicas = workload.New(kube, dyn, tpl), tpl.Namespace
	}
	return api, nil
}

// nodeReplication lets the node plugin hand replicated volumes over
// (--replica-template with --cluster-state kubernetes): publish and
// unpublish reach this node's volume managers through their control
// sockets in --replica-control-dir.
func nodeReplication(o *Options, api *kubeAPI, lock ports.WriteLock, events ports.EventRecorder, takers *failover.Takers) []publish.Option {
	if api == nil || api.workload == nil || o.ReplicaControl == "" {
		return nil
	}
	r := publish.Replication{
		Cluster:   api.states,
		Control:   replicactl.NewClient(o.ReplicaControl, replica.Node(o.NodeID)),
		Workload:  api.workload,
		Events:    events,
		Wait:      o.HandoverWait,
		WriteLock: lock,
	}
	if takers != nil {
		r.Takers = takers
	}
	return []publish.Option{publish.WithReplication(r)}
}

// daemonTakers are the node's acknowledged takers (failover.Takers) when
// it takes part in node-loss failover (--cluster-state kubernetes with
// --peer-advertise: a lease, a guard and a survivor); nil otherwise.
func daemonTakers(o *Options, api *kubeAPI, log *zap.Logger) *failover.Takers {
	if api == nil || o.PeerAdvertise == "" {
		return nil
	}
	return failover.NewTakers(replica.Node(o.NodeID), api.states, log.Named("takers"))
}
