package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-csi/ferry/adapters/filecluster"
	"github.com/ferry-csi/ferry/adapters/kube/peerdir"
	"github.com/ferry-csi/ferry/adapters/metrics"
	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/adapters/permitfile"
	"github.com/ferry-csi/ferry/adapters/replicactl"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// tlsFiles are the peer TLS files; a renewal that is not taken is logged.
func (o PeerOptions) tlsFiles(log *zap.Logger) peer.TLSFiles {
	f := peer.TLSFiles{Cert: o.PeerCert, Key: o.PeerKey, CA: o.PeerCA, ServerName: o.PeerServerName, RequireNode: o.PeerRequireNode,
		OnReject: func(err error) { log.Warn("peer TLS", zap.Error(err)) }}
	if o.PeerIdentityDir != "none" && o.PeerIdentityDir != "" {
		f.NodeCert, f.NodeKey = filepath.Join(o.PeerIdentityDir, "tls.crt"), filepath.Join(o.PeerIdentityDir, "tls.key")
	}
	return f
}

// peerServer serves this node's snapshots to its peers when --peer-listen
// is set: mutual TLS unless --insecure-peer.
func peerServer(lc fx.Lifecycle, o PeerOptions, store ports.SnapshotStore, relay *promiseRelay, log *zap.Logger) error {
	if o.PeerListen == "" {
		return nil
	}
	var creds credentials.TransportCredentials
	if !o.InsecurePeer {
		c, err := peer.ServerTLS(o.tlsFiles(log))
		if err != nil {
			return err
		}
		creds = c
	} else {
		log.Warn("peer service without TLS (--insecure-peer): any process that reaches the port can read volumes")
	}
	srv := peer.NewServer(store, creds, log.Named("peer"))
	if relay != nil {
		srv.SetPromiser(relay.Promise)
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			l, err := net.Listen("tcp", o.PeerListen)
			if err != nil {
				return fmt.Errorf("peer service: %w", err)
			}
			go func() { _ = srv.Serve(l) }()
			log.Info("serving peers", zap.String("address", l.Addr().String()), zap.Bool("tls", !o.InsecurePeer))
			return nil
		},
		OnStop: func(context.Context) error { srv.Stop(); return nil },
	})
	return nil
}

func peerClient(lc fx.Lifecycle, o PeerOptions, namespace string, api *kubeAPI, log *zap.Logger) (*peer.Client, error) {
	peers, err := parsePeers(o.Peers)
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if !o.InsecurePeer {
		if creds, err = peer.ClientTLS(o.tlsFiles(log)); err != nil {
			return nil, err
		}
	}
	resolve := func(n replica.Node) (string, error) {
		if addr, ok := peers[string(n)]; ok {
			return addr, nil
		}
		return "", fmt.Errorf("no address known for node %s (--peers)", n)
	}
	if api != nil && len(peers) == 0 {
		// From the nodes' Leases.
		resolve = peerdir.NewResolver(api.kube, namespace, 30*time.Second).Resolve
	}
	c := peer.NewClient(resolve, creds)
	lc.Append(fx.Hook{OnStop: func(context.Context) error { return c.Close() }})
	return c, nil
}

func clusterState(o KubeOptions, api *kubeAPI) (replication.SharedState, error) {
	if api != nil {
		return api.states, nil
	}
	dir, ok := strings.CutPrefix(o.ClusterState, "file:")
	if !ok || dir == "" {
		return nil, errors.New("--cluster-state is required: kubernetes or file:<dir>")
	}
	return filecluster.New(dir)
}

// kubeConfig is the API client's configuration: the kubeconfig file when
// one is named, else the pod's in-cluster credentials. Client-side rate
// limits are raised above client-go's 5/s: a node's daemon and volume
// managers write at most once per volume per snapshot interval, and must
// not queue behind their own reads.
func kubeConfig(path, component string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client (--kubeconfig %q): %w", path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "ferry/" + component
	return cfg, nil
}

func replicator(o ReplicaOptions, node replica.Node, lag uint64, store ports.SnapshotStore, pool ports.PoolFeatures, cluster replication.SharedState, t *peer.Client, events ports.EventRecorder, log *zap.Logger) (*replication.Replicator, error) {
	id, err := volume.ParseID("--volume", o.Volume)
	if err != nil {
		return nil, err
	}
	cfg := replication.Config{Node: node, Volume: id, Tick: o.Tick, Resync: o.Resync, Poll: !o.Watch, SnapshotInterval: o.SnapshotInterval, AllowedLag: lag, Keep: o.Keep,
		MaxTransferRate: int64(o.MaxTransferRate), Accept: pool.StreamFeatures()}
	return replication.New(cfg, store, cluster, t, events, log), nil
}

// runReplicator runs the volume manager; on stop (SIGTERM) it runs the
// safe-deletion protocol: the local copy goes only if enough up-to-date
// replicas remain, else it stays for the next volume manager.
func runReplicator(lc fx.Lifecycle, vol string, r *replication.Replicator, log *zap.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() { _ = r.Run(ctx); close(done) }()
			return nil
		},
		OnStop: func(stopCtx context.Context) error {
			cancel()
			<-done
			err := r.Terminate(stopCtx)
			if err != nil {
				log.Warn("local copy kept on termination", zap.String("volume", vol), zap.Error(err))
			} else {
				log.Info("local copy released on termination", zap.String("volume", vol))
			}
			return nil
		},
	})
}

// statusHandler serves the replica's status (GET /status, JSON) and takes
// snapshot requests (POST /snapshot: the primary snapshots at its next
// decision; unpublish asks for one so the next primary starts from it).
// It is meant for the node's own processes: bind it to localhost.
func statusHandler(r *replication.Replicator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Status())
	})
	mux.HandleFunc("POST /snapshot", func(w http.ResponseWriter, _ *http.Request) {
		r.SnapshotNow()
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

// readyHandler answers the kubelet's readiness probe: 200 while the
// replica is up to date (replica.IsReady, as last reported) or is the
// active primary, 503 otherwise, so that a ReplicaSet scaling down removes
// stale replicas first. It serves nothing else: it listens where the
// kubelet reaches it, unlike the status endpoint.
func readyHandler(r interface{ Status() replication.Status }) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		st := r.Status()
		if st.Ready || st.Primary {
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: snapshot %d of epoch %d\n", st.Snapshot, st.Epoch)
	})
	return mux
}

// statusServer serves statusHandler on --status-listen and readyHandler
// on --probe-listen.
func statusServer(lc fx.Lifecycle, o ReplicaOptions, r *replication.Replicator, log *zap.Logger) {
	serveHTTP(lc, o.ProbeListen, readyHandler(r), "serving the readiness probe", log)
	serveHTTP(lc, o.StatusListen, statusHandler(r), "serving status", log)
}

func serveHTTP(lc fx.Lifecycle, addr string, h http.Handler, what string, log *zap.Logger) {
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			go func() { _ = srv.Serve(l) }()
			log.Info(what, zap.String("address", l.Addr().String()))
			return nil
		},
		OnStop: func(ctx context.Context) error { return srv.Shutdown(ctx) },
	})
}

// controlServer serves the node plugin's publish and unpublish requests
// (adapters/replicactl) on this volume manager's socket in --control-dir.
func controlServer(lc fx.Lifecycle, o ReplicaOptions, node replica.Node, r *replication.Replicator, log *zap.Logger) {
	if o.ControlDir == "" {
		return
	}
	srv := &http.Server{Handler: replicactl.Handler(r), ReadHeaderTimeout: 5 * time.Second}
	var path string
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			id, err := volume.ParseID("--volume", o.Volume)
			if err != nil {
				return err
			}
			l, err := replicactl.Listen(o.ControlDir, node, id)
			if err != nil {
				return err
			}
			path = replicactl.SocketPath(o.ControlDir, node, id)
			go func() { _ = srv.Serve(l) }()
			log.Info("serving publish and unpublish", zap.String("socket", path))
			return nil
		},
		OnStop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			_ = os.Remove(path)
			return err
		},
	})
}

// runWatchdog runs the volume manager's watchdog (--watchdog): it fences
// the primary here when the node's write permit, which the node daemon
// publishes in --control-dir, has run out.
func runWatchdog(lc fx.Lifecycle, o ReplicaOptions, mounts ports.MountTable, node replica.Node, r *replication.Replicator, store ports.SnapshotStore, lock ports.WriteLock, events ports.EventRecorder, log *zap.Logger) error {
	if !o.Watchdog {
		return nil
	}
	id, err := volume.ParseID("--volume", o.Volume)
	if err != nil {
		return err
	}
	dir := permitfile.New(o.ControlDir, node, permitfile.Options{})
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: node, Volume: id, Poll: o.WatchdogPoll, Observed: r.Observed}, dir, dir, r.Secondary, store, mounts, lock, newHolderStopper(), events, log.Named("watchdog"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() { w.Run(ctx); close(done) }()
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			<-done
			return nil
		},
	})
	return nil
}

// promiseRelay hands the peer server's promise requests to the daemon's
// failover Survivor, made later by daemonKube.
type promiseRelay struct {
	mu sync.Mutex
	fn func(replica.Node) (bool, time.Duration)
}

func (r *promiseRelay) set(fn func(replica.Node) (bool, time.Duration)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fn = fn
}

// Promise answers with the Survivor's word; nothing is promised before it
// runs.
func (r *promiseRelay) Promise(n replica.Node) (bool, time.Duration) {
	r.mu.Lock()
	fn := r.fn
	r.mu.Unlock()
	if fn == nil {
		return false, 0
	}
	return fn(n)
}

// promiseClient is the daemon's peer client for promises, resolving
// nodes with addr.
func promiseClient(o PeerOptions, addr func(replica.Node) (string, bool), log *zap.Logger) (*peer.Client, error) {
	var creds credentials.TransportCredentials
	if !o.InsecurePeer {
		c, err := peer.ClientTLS(o.tlsFiles(log))
		if err != nil {
			return nil, err
		}
		creds = c
	}
	return peer.NewClient(func(n replica.Node) (string, error) {
		a, ok := addr(n)
		if !ok {
			return "", fmt.Errorf("no peer address known for node %s", n)
		}
		return a, nil
	}, creds), nil
}

// replicaState is what the volume manager's metrics say of its replica.
func replicaState(s replication.Status) metrics.ReplicaState {
	m := metrics.ReplicaState{Snapshot: uint64(s.Snapshot), Epoch: uint64(s.Epoch), Ready: s.Ready, Primary: s.Primary, StaleView: s.StaleView,
		NewestTaken: s.NewestTaken, Behind: uint64(s.Behind), HoldsNewest: s.HoldsNewest,
		ReplicationFactor: s.ReplicationFactor, ReadyCopies: s.Volume.Ready,
		Totals: metrics.Totals{SnapshotsTaken: s.Totals.SnapshotsTaken, Transfers: s.Totals.Transfers, TransferFailures: s.Totals.TransferFailures,
			TransferredBytes: s.Totals.TransferredBytes, TransferSeconds: s.Totals.TransferSeconds}}
	if t := s.Transfer; t != nil {
		m.Transfer = &metrics.Transfer{Bytes: t.Bytes, EstimatedBytes: t.EstimatedBytes, BytesPerSecond: t.BytesPerSecond, ETA: t.ETA}
	}
	return m
}
