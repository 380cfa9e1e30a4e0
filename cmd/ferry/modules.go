package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/adapters/registration"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/app/volumelock"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// base is in every mode: options (the whole, and each module's group for
// the constructors that take theirs), logger (also fx's own), the use
// cases' configs.
func base(o *Options, mode string) fx.Option {
	return fx.Options(
		fx.Supply(o, o.LogOptions, o.NodeOptions, o.StoreOptions, o.CSIOptions, o.PeerOptions, o.KubeOptions,
			o.PlacementOptions, o.FailoverOptions, o.ReplicaOptions),
		fx.Provide(func() (*zap.Logger, error) { return newLogger(o.LogOptions, o.NodeID, mode) }),
		fx.WithLogger(func(log *zap.Logger) fxevent.Logger {
			l := &fxevent.ZapLogger{Logger: log.Named("fx")}
			l.UseLogLevel(zapcore.DebugLevel)
			return l
		}),
		// One registry of metrics for the process, served on
		// --metrics-listen.
		fx.Provide(metrics.NewRegistry, metrics.Handler),
		fx.Invoke(func(lc fx.Lifecycle, reg *prometheus.Registry, mux *http.ServeMux, log *zap.Logger) {
			metrics.NewBuildInfo(reg, version, mode)
			serveHTTP(lc, o.MetricsListen, mux, "serving metrics", log)
		}),
		// One table of per-volume locks for the process: a daemon that
		// also serves the controller never deletes a volume it publishes.
		fx.Provide(volumelock.New),
		fx.Provide(func(locks *volumelock.Locks) provision.Config {
			return provision.Config{Node: replica.Node(o.NodeID), Pool: o.Pool, Locks: locks}
		}),
		fx.Provide(func(locks *volumelock.Locks) publish.Config {
			return publish.Config{Node: replica.Node(o.NodeID), KubeletDir: o.KubeletDir, Locks: locks}
		}),
	)
}

func newLogger(o LogOptions, node, mode string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(o.LogLevel)
	if err != nil {
		return nil, err
	}
	cfg := zap.NewProductionConfig()
	if o.LogFormat == "console" {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	log, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	return log.With(zap.String("mode", mode), zap.String("node", node)), nil
}

// storeModule provides ports.SnapshotStore and ports.WriteLock: the ZFS
// pool, or a directory.
func storeModule(o StoreOptions, driver string) fx.Option {
	if o.Store == "memory" {
		return fx.Provide(fx.Annotate(
			func() *memstore.Store { return memstore.New(o.MemoryDir, 100*volume.GiB, 1) },
			fx.As(new(ports.SnapshotStore)), fx.As(new(ports.WriteLock)), fx.As(new(ports.KeptCopies))),
			func() ports.PoolFeatures { return ports.NoPoolFeatures{} })
	}
	return fx.Provide(fx.Annotate(
		func(lc fx.Lifecycle, reg *prometheus.Registry, log *zap.Logger) (*zfs.Store, error) {
			s, err := zfs.New(zfs.Config{Pool: o.Pool, Parent: o.Parent, Driver: driver, ZFS: o.ZFSBin, Zpool: o.ZpoolBin, HostRoot: o.HostRoot,
				Observe: metrics.NewZFS(reg).Observe})
			if err != nil {
				return nil, err
			}
			s.SetLogger(log.Named("zfs"))
			lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
				if err := s.Open(ctx); err != nil {
					return err
				}
				log.Info("zfs store open", zap.String("pool", o.Pool), zap.String("dataset", s.Root()))
				return nil
			}})
			return s, nil
		},
		fx.As(new(ports.SnapshotStore)), fx.As(new(ports.WriteLock)), fx.As(new(ports.PoolFeatures)), fx.As(new(ports.KeptCopies))))
}

// csiServer serves the CSI services on the endpoint; its hooks start the
// server in the background and stop it gracefully.
func csiServer(lc fx.Lifecycle, o CSIOptions, reg *prometheus.Registry, log *zap.Logger, svc csiServices) *csi.Server {
	srv := csi.NewServer(log.Named("csi"), svc.identity, svc.controller, svc.node, csi.WithCallObserver(metrics.NewCSI(reg).Observe))
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			for _, ep := range []string{o.CSIEndpoint, o.SidecarEndpoint} {
				if ep == "" {
					continue
				}
				l, err := srv.Listen(ep)
				if err != nil {
					return fmt.Errorf("csi endpoint: %w", err)
				}
				go func() {
					if err := srv.Serve(l); err != nil && err != net.ErrClosed {
						log.Error("csi server stopped", zap.String("endpoint", ep), zap.Error(err))
					}
				}()
				log.Info("serving csi", zap.String("endpoint", ep))
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			srv.Stop(ctx)
			log.Info("csi server stopped")
			return nil
		},
	})
	return srv
}

// csiServices are the CSI services a mode serves; nil ones are not served.
type csiServices struct {
	identity   *csi.Identity
	controller *csi.Controller
	node       *csi.Node
}

func identity(o NodeOptions, store ports.SnapshotStore) *csi.Identity {
	return &csi.Identity{Name: o.DriverName, Version: version,
		Ready: func(ctx context.Context) error { _, err := store.Capacity(ctx); return err }}
}

func controllerApp(o *Options) fx.Option {
	return fx.Options(
		base(o, "controller"),
		storeModule(o.StoreOptions, o.DriverName),
		fx.Provide(
			// The mount table of the node the controller runs on: whether a
			// volume is published (DeleteVolume refuses one in use).
			func() ports.MountTable { return mount.Table{HostRoot: o.HostRoot} },
			func(cfg provision.Config, s ports.SnapshotStore, pool ports.PoolFeatures, mt ports.MountTable, log *zap.Logger) *provision.Service {
				return provision.New(cfg, s, mt, log, provision.WithPoolFeatures(pool))
			},
			func(uc *provision.Service, s ports.SnapshotStore) csiServices {
				return csiServices{identity: identity(o.NodeOptions, s), controller: &csi.Controller{UC: uc}}
			},
			csiServer,
		),
		fx.Invoke(func(*csi.Server) {}),
	)
}

func volumeManagerApp(o *Options) fx.Option {
	return fx.Options(
		base(o, "volume-manager"),
		storeModule(o.StoreOptions, o.DriverName),
		fx.Provide(
			func() (*kubeAPI, error) { return newKubeAPI(o.KubeOptions, "", replicaSettings{}, "volume-manager") },
			func(api *kubeAPI) (replication.SharedState, error) { return clusterState(o.KubeOptions, api) },
			func(lc fx.Lifecycle, api *kubeAPI, log *zap.Logger) (*peer.Client, error) {
				return peerClient(lc, o.PeerOptions, o.Namespace, api, log)
			},
			// Events on the ReplicatedVolume and its claim (the replica's
			// ServiceAccount may get claims; a release whose RBAC does not
			// grant it yet raises them on the ReplicatedVolume only).
			func(lc fx.Lifecycle, api *kubeAPI, reg *prometheus.Registry, log *zap.Logger) (ports.EventRecorder, error) {
				return eventRecorder(lc, o, api, reg, log, true)
			},
			func(s ports.SnapshotStore, pool ports.PoolFeatures, c replication.SharedState, t *peer.Client, events ports.EventRecorder, log *zap.Logger) (*replication.Replicator, error) {
				return replicator(o.ReplicaOptions, replica.Node(o.NodeID), o.AllowedLag, s, pool, c, t, events, log)
			},
		),
		fx.Invoke(
			func(lc fx.Lifecycle, s ports.SnapshotStore, log *zap.Logger) error {
				return peerServer(lc, o.PeerOptions, s, nil, log)
			},
			func(lc fx.Lifecycle, r *replication.Replicator, log *zap.Logger) { runReplicator(lc, o.Volume, r, log) },
			func(lc fx.Lifecycle, r *replication.Replicator, log *zap.Logger) {
				statusServer(lc, o.ReplicaOptions, r, log)
			},
			func(reg *prometheus.Registry, r *replication.Replicator, api *kubeAPI) {
				metrics.NewReplica(reg, o.Volume, o.NodeID, func() metrics.ReplicaState { return replicaState(r.Status()) })
				if api != nil && api.states != nil {
					// Its claim, for the queries that ask by claim.
					metrics.NewVolumeInfo(reg, o.Volume, o.NodeID, func(ctx context.Context) (ports.VolumeSpec, error) {
						return api.states.Spec(ctx, volume.ID(o.Volume))
					})
				}
			},
			func(lc fx.Lifecycle, r *replication.Replicator, log *zap.Logger) {
				controlServer(lc, o.ReplicaOptions, replica.Node(o.NodeID), r, log)
			},
			// Fencing does not hinge on the daemon: the primary's own
			// watchdog fences on the node's permit when it runs out.
			func(lc fx.Lifecycle, r *replication.Replicator, s ports.SnapshotStore, lock ports.WriteLock, events ports.EventRecorder, log *zap.Logger) error {
				return runWatchdog(lc, o.ReplicaOptions, mount.Table{HostRoot: o.HostRoot}, replica.Node(o.NodeID), r, s, lock, events, log)
			},
		),
	)
}

// registerWithKubelet serves the kubelet's plugin registration socket
// (the node-driver-registrar's job, done in process).
func registerWithKubelet(lc fx.Lifecycle, o CSIOptions, driver string, log *zap.Logger) error {
	if o.RegistrationDir == "none" {
		return nil
	}
	reg, err := registration.New(registration.Config{Driver: driver, Dir: o.RegistrationDir, Endpoint: o.RegistrationPath}, log.Named("registration"))
	if err != nil {
		return err
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if st, err := os.Stat(o.RegistrationDir); err != nil || !st.IsDir() {
				log.Warn("the kubelet's plugin registry directory does not exist: not registering", zap.String("dir", o.RegistrationDir))
				return nil
			}
			return reg.Start()
		},
		OnStop: func(context.Context) error { reg.Stop(); return nil },
	})
	return nil
}

// checkKubeletDir makes sure the kubelet directory is a directory named by
// its canonical path: the mount table spells mount points without
// symlinks, so target paths below a symlinked kubelet directory would
// never be recognised as mounted.
func checkKubeletDir(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("--kubelet-dir: %w", err)
	}
	if real != dir {
		return fmt.Errorf("--kubelet-dir %s is reached through a symlink; pass its real path %s", dir, real)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("--kubelet-dir %s is not a directory", dir)
	}
	return nil
}
