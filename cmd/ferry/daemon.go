package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/daemonlock"
	"github.com/ferry-csi/ferry/adapters/identityfiles"
	"github.com/ferry-csi/ferry/adapters/kube/certrequest"
	"github.com/ferry-csi/ferry/adapters/kube/claims"
	"github.com/ferry-csi/ferry/adapters/kube/directory"
	"github.com/ferry-csi/ferry/adapters/kube/lostnode"
	"github.com/ferry-csi/ferry/adapters/kube/nodelabels"
	"github.com/ferry-csi/ferry/adapters/kube/peerdir"
	"github.com/ferry-csi/ferry/adapters/kube/workload"
	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/adapters/nodefence"
	"github.com/ferry-csi/ferry/adapters/permitfile"
	"github.com/ferry-csi/ferry/app/failover"
	peeridentity "github.com/ferry-csi/ferry/app/identity"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// The daemon is five modules over the store: Kubernetes (the client set
// and the events), CSI (the node service, the controller's with
// --node-deployment, the kubelet's registration), peers (the peer
// service: streams and promises), failover (the node's lease, guard and
// survivor) and orchestration (the copies' placement, adoption and the
// Immediate claims). Each takes its own options group.
func daemonApp(o *Options) fx.Option {
	relay := &promiseRelay{}
	return fx.Options(
		base(o, "daemon"),
		storeModule(o.StoreOptions, o.DriverName),
		daemonKubeModule(o),
		fx.Module("identity", fx.Invoke(func(lc fx.Lifecycle, api *kubeAPI, log *zap.Logger) error {
			return runEnroller(lc, o, api, log)
		})),
		fx.Module("peers", fx.Invoke(
			// One peer service per node can serve every volume of the
			// pool. It also answers other nodes' requests for promises,
			// with what this node's failover Survivor observes (relay).
			func(lc fx.Lifecycle, s ports.SnapshotStore, log *zap.Logger) error {
				return peerServer(lc, o.PeerOptions, s, relay, log)
			})),
		failoverModule(o, relay),
		orchestrationModule(o),
		fx.Invoke(func(reg *prometheus.Registry, mux *http.ServeMux, s ports.SnapshotStore, kept ports.KeptCopies) {
			metrics.NewPool(reg, o.NodeID, o.Pool, s.Capacity)
			// The copies kept aside: counted, and listed on GET /kept
			// (kubectl ferry fenced).
			mux.Handle("GET /kept", metrics.NewKept(reg, o.NodeID, kept.ListKept))
		}),
		// A SIGTERM while the pod replacing this one has not started its
		// daemon (a surge deleting an old pod that was unready for a
		// moment, its successor still pulling) keeps the node's duties
		// until it has, or until the pod's grace period is about to end.
		fx.Provide(func(api *kubeAPI, log *zap.Logger) stopHold {
			pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
			if api == nil || pod == "" || ns == "" {
				return nil
			}
			next := workload.NextDaemons{Client: api.kube, Namespace: ns, Pod: pod, Container: "ferry"}
			cfg := orchestration.HandoverConfig{Margin: o.StopTimeout + 5*time.Second, Unread: 10 * time.Second, Absent: 2 * time.Second}
			return func(ctx context.Context, since time.Time) {
				orchestration.HandOver(ctx, cfg, next, since, time.Now, log.Named("handover"))
			}
		}),
		// Last to start, first to stop: a stopping daemon drains its calls
		// in flight (up to --stop-timeout) while its Lease is still renewed
		// and its guard still fences, so that a slow NodePublish never
		// leaves the node without a Lease during an upgrade.
		csiModule(o),
	)
}

// runEnroller keeps this node's own peer certificate in --peer-identity-dir
// (app/identity.Enroller), from Ferry's signer, on Kubernetes with mutual
// TLS. It never holds the daemon's start back: until a certificate is
// there the peers are served and dialled with the shared one (which no
// promise is granted to), and one obtained before is kept across
// restarts, the API server away or not.
func runEnroller(lc fx.Lifecycle, o *Options, api *kubeAPI, log *zap.Logger) error {
	if api == nil || o.InsecurePeer || o.PeerIdentityDir == "none" {
		return nil
	}
	files, err := identityfiles.New(o.PeerIdentityDir)
	if err != nil {
		return fmt.Errorf("--peer-identity-dir: %w", err)
	}
	log = log.Named("identity")
	e := peeridentity.NewEnroller(peeridentity.EnrollerConfig{Node: o.NodeID}, certrequest.New(api.kube, log, certrequest.Options{}),
		files, time.Now, log, peeridentity.WithEnrollerRoots(identityfiles.RootsFile(o.PeerCA)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() { defer close(done); e.Run(ctx) }()
			return nil
		},
		OnStop: func(context.Context) error { cancel(); <-done; return nil },
	})
	return nil
}

// acquireNodeLock waits, before the daemon starts anything, until no
// other daemon runs on the node (--node-lock): a surge's old pod, which
// keeps the node's duties until it stopped. The lock lasts as long as
// the process. A SIGTERM or SIGINT while waiting ends the wait (nil lock,
// nil error: the daemon stops without having started).
func acquireNodeLock(o *Options) (*daemonlock.Lock, error) {
	log, err := newLogger(o.LogOptions, o.NodeID, "daemon")
	if err != nil {
		return nil, err
	}
	sock, err := csi.SocketPath(o.CSIEndpoint)
	if err != nil {
		return nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	start := time.Now()
	l, err := daemonlock.Acquire(ctx, daemonlock.Options{Path: o.NodeLock, Socket: sock,
		Waiting: func(why string, since time.Duration) {
			log.Info("waiting for the node's other daemon to stop", zap.String("why", why), zap.Duration("waited", since))
		}})
	if ctx.Err() != nil {
		log.Info("stopped while waiting for the node's other daemon")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the node's daemon lock: %w", err)
	}
	// (Found free, in a surge: the old daemon stopped before this one
	// started, and the node was without a daemon meanwhile.)
	log.Info("this daemon has the node", zap.String("lock", o.NodeLock), zap.Duration("waited", time.Since(start)), zap.Bool("heldByOther", l.Contended()))
	return l, nil
}

// daemonKubeModule: the process's one Kubernetes client set (nil without
// --cluster-state kubernetes) and where events go (the ReplicatedVolume
// and its claim).
func daemonKubeModule(o *Options) fx.Option {
	return fx.Module("kubernetes", fx.Provide(
		func() (*kubeAPI, error) {
			return newKubeAPI(o.KubeOptions, o.ReplicaTemplate, replicaSettings{AllowedLag: o.AllowedLag, HostRoot: o.HostRoot, MetricsListen: o.ReplicaMetricsListen}, "daemon")
		},
		func(lc fx.Lifecycle, api *kubeAPI, reg *prometheus.Registry, log *zap.Logger) (ports.EventRecorder, error) {
			return eventRecorder(lc, o, api, reg, log, true)
		},
	))
}

// csiModule serves the CSI node service (and the controller's, for
// sidecars on every node) and registers with the kubelet.
func csiModule(o *Options) fx.Option {
	return fx.Module("csi",
		fx.Provide(
			func(lc fx.Lifecycle) ports.Mounter {
				lc.Append(fx.Hook{OnStart: func(context.Context) error { return checkKubeletDir(o.KubeletDir) }})
				return mount.Linux{Table: mount.Table{HostRoot: o.HostRoot}}
			},
			func() ports.MountTable { return mount.Table{HostRoot: o.HostRoot} },
			// Publish and unpublish hand replicated volumes over.
			func(cfg publish.Config, s ports.SnapshotStore, m ports.Mounter, api *kubeAPI, lock ports.WriteLock, events ports.EventRecorder, takers *failover.Takers, log *zap.Logger) *publish.Service {
				return publish.New(cfg, s, m, log, nodeReplication(o, api, lock, events, takers)...)
			},
			func(lc fx.Lifecycle, uc *publish.Service, cfg provision.Config, api *kubeAPI, s ports.SnapshotStore, pool ports.PoolFeatures, mt ports.MountTable, events ports.EventRecorder, log *zap.Logger) csiServices {
				svc := csiServices{identity: identity(o.NodeOptions, s), node: &csi.Node{UC: uc}}
				if o.ServeController {
					// The controller service next to this node's pool, for
					// sidecars running on every node (--node-deployment):
					// volumes are created where their pod runs. Expansion is
					// the node's (NodeExpandVolume).
					opts := append(controllerReplication(api, events), provision.WithPoolFeatures(pool))
					if api != nil {
						// A restore scheduled here whose snapshot another
						// node holds fetches it from there. Without peer
						// TLS (no Secret yet) the node serves on, and such
						// a restore answers NotFound.
						client, err := peerClient(lc, o.PeerOptions, o.Namespace, api, log)
						if err != nil {
							log.Warn("restores of snapshots other nodes hold are off: no peer client", zap.Error(err))
						} else {
							opts = append(opts, provision.WithPeers(provision.Peers{Transport: client, Nodes: peerdir.NewLeases(api.kube, o.Namespace)}))
						}
					}
					ctrl := provision.New(cfg, s, mt, log, opts...)
					svc.controller = &csi.Controller{UC: ctrl, NodeExpansion: true}
				}
				return svc
			},
			csiServer,
		),
		fx.Invoke(
			func(*csi.Server) {},
			// After the CSI server: the kubelet calls NodeGetInfo at once.
			func(lc fx.Lifecycle, log *zap.Logger) error {
				return registerWithKubelet(lc, o.CSIOptions, o.DriverName, log)
			},
		),
	)
}

// failoverModule: with --cluster-state kubernetes and --peer-advertise,
// the Guard renews the node's Lease (liveness and peer address) and
// fences the primaries here when it cannot; the Survivor takes lost
// nodes' volumes over. Takers are the copies that may take this node's
// primaries over, as the publish and the guard acknowledge them (nil
// without node-loss failover); Volumes is the daemon's view of every
// volume, kept by the orchestration's feed.
func failoverModule(o *Options, relay *promiseRelay) fx.Option {
	return fx.Module("failover",
		fx.Provide(
			func(api *kubeAPI, log *zap.Logger) *failover.Takers { return daemonTakers(o, api, log) },
			failover.NewVolumes,
		),
		fx.Invoke(func(lc fx.Lifecycle, api *kubeAPI, store ports.SnapshotStore, lock ports.WriteLock, mounts ports.MountTable, events ports.EventRecorder,
			takers *failover.Takers, vols *failover.Volumes, prep *publish.Service, reg *prometheus.Registry, log *zap.Logger) error {
			if api == nil || takers == nil {
				return nil
			}
			return runFailover(lc, o, api, store, lock, mounts, newFencer(), relay, events, takers, vols, prep, metrics.NewLiveness(reg), log)
		}),
	)
}

func runFailover(lc fx.Lifecycle, o *Options, api *kubeAPI, store ports.SnapshotStore, lock ports.WriteLock, mounts ports.MountTable, fencer ports.Fencer,
	relay *promiseRelay, events ports.EventRecorder, takers *failover.Takers, vols *failover.Volumes, prep failover.Preparer, live *metrics.Liveness, log *zap.Logger) error {
	node := replica.Node(o.NodeID)
	fcfg := failover.Config{Node: node, Lease: o.leaseConfig(), Lag: o.AllowedLag}
	if o.FenceNodeCommand != "" {
		fcfg.FenceNode = nodefence.Command{Path: o.FenceNodeCommand}
	}
	clock := failover.MonotonicClock()
	pub := peerdir.NewPublisher(api.kube, o.Namespace, node, o.PeerAdvertise)
	pub.Duration, pub.Margin = o.LeaseDuration, o.LeaseMargin
	effects := lostnode.New(api.kube, o.DriverName, api.replicas)
	// A copy taken over here is remounted at once, while the lost node's
	// pods are rescheduled, not when the new pod's publish comes.
	survivor := failover.NewSurvivor(fcfg, clock, peerdir.NewLeases(api.kube, o.Namespace), api.states, vols, store,
		effects, events, log.Named("survivor"), failover.WithPreparer(prep), failover.WithPredecessor(pub.Predecessor))
	relay.set(live.Answers(survivor.Promise))
	// Promises are asked for at the peer addresses the leases last
	// published: they matter when the API server cannot be read.
	asker, err := promiseClient(o.PeerOptions, survivor.PeerAddress, log)
	if err != nil {
		return err
	}
	opts := []failover.GuardOption{failover.WithPromises(live.Asker(asker))}
	// The guard's verdicts, for the volume managers' watchdogs: they
	// fence their primaries on them when this daemon is down.
	if o.ReplicaControl != "" {
		permits := permitfile.New(o.ReplicaControl, node, permitfile.Options{})
		opts = append(opts, failover.WithPermits(permits, permits, lock))
	}
	guard := failover.NewGuard(fcfg, clock, live.Lease(pub), vols, takers, store, mounts, fencer, effects, events, log.Named("guard"), opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	lc.Append(fx.Hook{
		OnStart: func(startCtx context.Context) error {
			if err := effects.EnsureFencedList(startCtx); err != nil {
				log.Warn("the node daemon's pod deletions are refused until the list of fenced nodes exists", zap.Error(err))
			}
			go func() { defer func() { done <- struct{}{} }(); guard.Run(ctx) }()
			go func() { defer func() { done <- struct{}{} }(); survivor.Run(ctx) }()
			log.Info("renewing the node's lease with its peer address", zap.String("address", o.PeerAdvertise), zap.String("lease", o.Namespace+"/"+peerdir.LeaseName(node)),
				zap.Duration("renew", o.LeaseRenew), zap.Duration("duration", o.LeaseDuration), zap.Duration("margin", o.LeaseMargin))
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			<-done
			<-done
			return asker.Close()
		},
	})
	return nil
}

// orchestrationModule: with --cluster-state kubernetes, every
// --placement-period a volume manager for each listed local copy and the
// size of the workloads of volumes whose primary is here (with
// --replica-template), then the node's placement labels; and the
// Immediate claims' nodes.
func orchestrationModule(o *Options) fx.Option {
	return fx.Module("orchestration", fx.Invoke(
		func(lc fx.Lifecycle, api *kubeAPI, store ports.SnapshotStore, events ports.EventRecorder, takers *failover.Takers, vols *failover.Volumes, log *zap.Logger) {
			if api == nil {
				return
			}
			runOrchestration(lc, o, api, store, events, takers, vols, log)
		}))
}

func runOrchestration(lc fx.Lifecycle, o *Options, api *kubeAPI, store ports.SnapshotStore, events ports.EventRecorder, takers *failover.Takers, vols *failover.Volumes, log *zap.Logger) {
	node := replica.Node(o.NodeID)
	api.states.OnSkipped(func(name string, err error) {
		log.Warn("a ReplicatedVolume is left out of this daemon's view: it cannot be read as a volume's state", zap.String("object", name), zap.Error(err))
	})
	labeler := orchestration.NewLabeler(node, store, api.states, nodelabels.New(api.kube), log.Named("placement"))
	var adopter *orchestration.Adopter
	var rediscoverer *orchestration.Rediscoverer
	var retirer *orchestration.Retirer
	listeners := []func(ports.StateChange){vols.Apply}
	if api.workload != nil {
		leave := func(ctx context.Context, id volume.ID) error {
			return replication.LeaveHere(ctx, node, id, store, api.states, events, log.Named("adopt"))
		}
		// The replica pods roll to this daemon's version once it is the
		// DaemonSet's current one (placement.NextRoll).
		adopter = orchestration.NewAdopter(node, store, api.states, api.workload, leave, log.Named("adopt"), orchestration.WithRollout(api.workload))
		// Lost states rebuilt from the copies (replica.Rediscover).
		dir := directory.New(api.kube, o.Namespace, o.DriverName, csi.TopologyKey)
		rediscoverer = orchestration.NewRediscoverer(node, store, api.states, api.states, mount.Table{HostRoot: o.HostRoot}, dir, dir, events, log.Named("rediscover"))
		// Copies gone for good (a deleted node's, an empty pool's) retired.
		retirer = orchestration.NewRetirer(node, store, api.states, dir, api.workload, events, log.Named("retire"))
		listeners = append(listeners, rediscoverer.Saw, retirer.Saw)
	}
	// The feed keeps the Guard's view (every change, none dropped; a slow
	// reader gets each volume's newest), updated before the placement's
	// own work.
	forget := func(c ports.StateChange) {
		if c.Gone && takers != nil {
			takers.Forget(c.Volume) // deleted: no term of it here
		}
	}
	placement := &orchestration.Placement{Labeler: labeler, Rediscoverer: rediscoverer, Retirer: retirer, Adopter: adopter, Feed: api.states,
		Listeners: append(listeners, forget), Period: o.PlacementPeriod, Log: log.Named("placement")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				// Immediate claims: every daemon selects the same node for
				// each (orchestration.Binder), no leader.
				defer func() { done <- struct{}{} }()
				cl, err := claims.Start(ctx, api.kube, o.DriverName, csi.TopologyKey)
				if err != nil {
					if ctx.Err() == nil {
						log.Error("Immediate claims will not be placed", zap.Error(err))
					}
					return
				}
				orchestration.NewBinder(cl, log.Named("bind")).Run(ctx, o.PlacementPeriod)
			}()
			go func() { defer func() { done <- struct{}{} }(); placement.Run(ctx) }()
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			<-done
			<-done
			return nil
		},
	})
}
