package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/volume"
)

// Options are every mode's flags, grouped by the module that uses them
// (each group embedded, so o.Field reads any of them); each mode
// registers the groups it uses, and each module's constructor takes its
// own group only.
type Options struct {
	LogOptions
	NodeOptions
	StoreOptions
	CSIOptions
	PeerOptions
	KubeOptions
	PlacementOptions
	FailoverOptions
	ReplicaOptions
	SignerOptions
}

// LogOptions: every mode's logging, metrics and shutdown.
type LogOptions struct {
	LogLevel      string
	LogFormat     string
	StopTimeout   time.Duration
	MetricsListen string // --metrics-listen: Prometheus metrics (GET /metrics); "" none
}

// NodeOptions: who this process is.
type NodeOptions struct {
	DriverName string
	NodeID     string
}

// StoreOptions: the pool (storeModule).
type StoreOptions struct {
	Store     string // "zfs" or "memory"
	Pool      string
	Parent    string
	ZFSBin    string
	ZpoolBin  string
	HostRoot  string // --host-root: the host's root, where zfs and zpool run
	MemoryDir string
}

// CSIOptions: the CSI services (daemon, controller).
type CSIOptions struct {
	CSIEndpoint string
	// daemon: a second socket for the pod's own sidecars (an emptyDir
	// only its containers share), served with CSIEndpoint: a surge's new
	// pod's sidecars then wait for their own daemon, never connect to the
	// old one's socket and lose it when the old one stops ("" : none).
	SidecarEndpoint string
	NodeLock        string // the daemon's node lock (daemonlock)
	KubeletDir      string // daemon: every pod target path lies below it
	// daemon: registration with the kubelet (plugin registration API)
	RegistrationDir  string
	RegistrationPath string
	ServeController  bool          // daemon: also serve the CSI Controller service
	HandoverWait     time.Duration // daemon: a read/write publish's wait for the primary
}

// PeerOptions: the peer service and its clients (daemon, volume-manager).
type PeerOptions struct {
	PeerListen     string
	PeerCert       string
	PeerKey        string
	PeerCA         string
	PeerServerName string
	InsecurePeer   bool
	// PeerIdentityDir holds this node's own certificate (tls.crt,
	// tls.key), which the daemon obtains and renews; "" until validate
	// derives it from the control directory, "none" for no own one.
	PeerIdentityDir string
	PeerRequireNode bool
	Peers           string // volume-manager: static node=host:port list
	PeerAdvertise   string // daemon: the peer address other nodes dial
}

// KubeOptions: where the shared state lives, and the API's client.
type KubeOptions struct {
	ClusterState string // file:<dir> | kubernetes
	Kubeconfig   string // for --cluster-state kubernetes; "" is in-cluster
	Namespace    string // Ferry's namespace: node leases
}

// PlacementOptions: the daemon's replica pods and labels.
type PlacementOptions struct {
	PlacementPeriod time.Duration
	ReplicaTemplate string // the replica pods' template (YAML)
	// ReplicaMetricsListen is every volume manager's --metrics-listen,
	// given to them as $FERRY_METRICS_LISTEN (with scrape annotations).
	ReplicaMetricsListen string
	ReplicaControl       string // where the volume managers' control sockets are
}

// FailoverOptions: the daemon's node lease, fence and takeovers.
type FailoverOptions struct {
	LeaseRenew       time.Duration // the node lease's renewal period
	LeaseDuration    time.Duration
	LeaseMargin      time.Duration
	FenceNodeCommand string
	AllowedLag       uint64 // also the volume managers' (ReplicaOptions reads it from here)
}

// ReplicaOptions: a volume manager's replica.
type ReplicaOptions struct {
	Volume           string // the volume ID
	ControlDir       string // where its control socket goes
	Tick             time.Duration
	Resync           time.Duration
	Watch            bool
	SnapshotInterval time.Duration
	Keep             int
	StatusListen     string
	ProbeListen      string
	MaxTransferRate  byteRate
	Watchdog         bool          // fence its primary when the node's permit runs out
	WatchdogPoll     time.Duration // how often the watchdog reads the permit
}

// DefaultDriverName is Ferry's CSI driver name.
const DefaultDriverName = "ferry.zfs.csi.io"

func commonFlags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", "json", "log format: json or console")
	fs.DurationVar(&o.StopTimeout, "stop-timeout", 30*time.Second, "on SIGTERM, how long calls in flight may take to finish")
	fs.StringVar(&o.MetricsListen, "metrics-listen", os.Getenv(metricsListenEnv), "address of the Prometheus metrics endpoint (GET /metrics), e.g. :9808; empty: none (default $"+metricsListenEnv+")")
	return o
}

func nodeFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.DriverName, "driver-name", DefaultDriverName, "CSI driver name, also written on every dataset as its owner")
	fs.StringVar(&o.NodeID, "node-id", os.Getenv("NODE_NAME"), "this node's name (default: $NODE_NAME)")
}

func storeFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.Store, "store", "zfs", "storage backend: zfs, or memory (volumes in a local directory; for development only)")
	fs.StringVar(&o.Pool, "pool", "ferry", "ZFS pool that holds the volumes")
	fs.StringVar(&o.Parent, "parent-dataset", "ferry", "dataset under the pool that Ferry owns; volumes are its children")
	fs.StringVar(&o.ZFSBin, "zfs", "zfs", "path of the zfs command")
	fs.StringVar(&o.ZpoolBin, "zpool", "zpool", "path of the zpool command")
	fs.StringVar(&o.HostRoot, "host-root", os.Getenv(hostRootEnv), "where the host's tools are mounted (read-only) in this container, below a root of the host's own layout (/host/usr, /host/etc, ...): the image's zfs and zpool (cmd/ferry-hosttool) run the host's own tools there, which match the node's ZFS; its mounts are no copies of a volume in Ferry's mount tables; also given to the volume managers (default $"+hostRootEnv+")")
	fs.StringVar(&o.MemoryDir, "memory-dir", "/var/tmp/ferry-memory", "directory of the memory store's volumes")
}

func daemonFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	peerFlags(fs, o)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///var/lib/kubelet/plugins/"+DefaultDriverName+"/csi.sock", "CSI node service socket")
	fs.StringVar(&o.SidecarEndpoint, "csi-sidecar-endpoint", "", "a second CSI socket, for this pod's own sidecars (on a directory only the pod's containers share, e.g. an emptyDir): during a rolling update with a surge the new pod's sidecars wait there until their own daemon has the node, instead of connecting to the old daemon's --csi-endpoint and exiting when it stops (an exit makes a pod unready, and the DaemonSet deletes an unready old pod at once); empty: none")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", volume.DefaultKubeletDir, "the kubelet's root directory (its --root-dir), as an absolute path without symlinks; NodePublishVolume mounts only below it")
	fs.StringVar(&o.RegistrationDir, "registration-dir", "", "the kubelet's plugin registry directory, where the registration socket is served (default <kubelet-dir>/plugins_registry; none: do not register; skipped with a warning when it does not exist)")
	fs.BoolVar(&o.ServeController, "serve-controller", false, "also serve the CSI Controller service on the node's socket, for provisioner and snapshotter sidecars deployed on every node (--node-deployment); volumes then grow on the node (default false)")
	fs.StringVar(&o.NodeLock, "node-lock", "", "a lock file on a host directory: the daemon waits, before it starts anything, until no other daemon runs on the node (one holding the lock, or an earlier one still serving --csi-endpoint), so that a rolling update with a surge hands the node over from the old daemon to the new at once; empty: no wait")
	fs.StringVar(&o.RegistrationPath, "kubelet-registration-path", "", "the CSI socket's path as the kubelet sees it on the host (default <kubelet-dir>/plugins/<driver-name>/csi.sock)")
	kubeFlags(fs, o)
	fs.StringVar(&o.PeerAdvertise, "peer-advertise", "", "with --cluster-state kubernetes: the address (host:port) of --peer-listen as other nodes reach it, published in this node's Lease; empty: none")
	fs.StringVar(&o.ReplicaMetricsListen, "replica-metrics-listen", "", "with --replica-template: every volume manager's metrics endpoint (e.g. :9809), given to them as $"+metricsListenEnv+" with prometheus.io/scrape annotations on their pods; empty: none")
	fs.StringVar(&o.ReplicaTemplate, "replica-template", "", "with --serve-controller and --cluster-state kubernetes: the replica pods' template (YAML, deploy/replica-template.yaml); volumes of defaultReplicationFactor 2 or more are then replicated; empty: none are")
	fs.DurationVar(&o.PlacementPeriod, "placement-period", 10*time.Second, "with --cluster-state kubernetes: how often the node's placement labels are checked against its copies")
	fs.StringVar(&o.ReplicaControl, "replica-control-dir", "/var/lib/ferry-control", "with --replica-template: the directory of the volume managers' control sockets (a host directory both mount); publish and unpublish of replicated volumes go through them, and the node's write permit their watchdogs fence on is published there")
	fs.DurationVar(&o.LeaseRenew, "lease-renew", time.Second, "with --peer-advertise: how often the daemon renews its node's Lease (liveness, per node)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", 3*time.Second, "with --peer-advertise: how long a node's Lease lasts: a node that cannot renew fences its primaries at duration - margin after its last accepted renewal was sent, and the other nodes take its volumes over once its Lease has not changed for duration + margin")
	fs.DurationVar(&o.LeaseMargin, "lease-margin", 500*time.Millisecond, "with --peer-advertise: what absorbs request delays and clock-rate drift between the fence and a takeover (they are 2 margins apart)")
	fs.StringVar(&o.FenceNodeCommand, "fence-node-command", "", "with --peer-advertise: a program run with a lost node's name as its only argument before any of that node's volumes is taken over from it (a power switch, a fence agent, a remediation operator's request); exit status 0: the node can no longer write; anything else holds the takeover back, retried; empty: takeovers follow the lease alone")
	fs.Uint64Var(&o.AllowedLag, "allowed-lag", 1, "snapshots a copy may be behind the newest and still take a lost primary's volume over (with --peer-advertise); with --replica-template, every volume manager is given the same (their --allowed-lag: a copy is ready under the lag a takeover counts)")
	fs.DurationVar(&o.HandoverWait, "handover-wait", publish.DefaultHandoverWait, "with --replica-template: how long a read/write publish waits for the replica to become the primary (another node's pod may still hold the volume) before answering Aborted, and an unpublish for the final snapshot")
	return o
}

// kubeFlags are the Kubernetes API settings of the modes that use it.
func kubeFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.ClusterState, "cluster-state", "", "where the shared replica list lives: kubernetes (the volume's ReplicatedVolume) or file:<dir> (shared by processes on one machine; volume-manager only)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig for --cluster-state kubernetes (default: the pod's in-cluster credentials)")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "ferry-system"
	}
	fs.StringVar(&o.Namespace, "namespace", ns, "Ferry's namespace, where the nodes' Leases live (default: $POD_NAMESPACE, else ferry-system)")
}

func controllerFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	fs.StringVar(&o.CSIEndpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI controller service socket")
	return o
}

func peerFlags(fs *flag.FlagSet, o *Options) {
	fs.StringVar(&o.PeerListen, "peer-listen", "", "address of this node's peer service (host:port); empty: none")
	fs.StringVar(&o.PeerCert, "peer-cert", "/etc/ferry/peer/tls.crt", "peer mutual-TLS certificate (from a Kubernetes Secret)")
	fs.StringVar(&o.PeerKey, "peer-key", "/etc/ferry/peer/tls.key", "peer mutual-TLS key")
	fs.StringVar(&o.PeerCA, "peer-ca", "/etc/ferry/peer/ca.crt", "CA that signs every node's peer certificate")
	fs.StringVar(&o.PeerServerName, "peer-server-name", "ferry-peer", "name every peer certificate carries (SAN), checked when dialling a peer")
	fs.BoolVar(&o.InsecurePeer, "insecure-peer", false, "serve and dial peers in plaintext, without authentication (tests only; never in a cluster) (default false)")
	fs.StringVar(&o.PeerIdentityDir, "peer-identity-dir", "", "directory of this node's own peer certificate (tls.crt, tls.key, naming the node), which the daemon obtains from Ferry's signer and renews, and presented instead of --peer-cert once there (default <control directory>/peer-identity/<node-id>; none: the shared certificate only)")
	fs.BoolVar(&o.PeerRequireNode, "peer-require-node-identity", false, "refuse every peer whose certificate names no node (the shared --peer-cert, all a release before per-node identities presents); set once every node and volume manager runs a release with them. Without it such peers are served and dialled, never granted a promise nor trusted for one (default false)")
}

func volumeManagerFlags(fs *flag.FlagSet) *Options {
	o := commonFlags(fs)
	nodeFlags(fs, o)
	storeFlags(fs, o)
	peerFlags(fs, o)
	fs.StringVar(&o.Volume, "volume", os.Getenv("FERRY_VOLUME"), "ID of the volume whose replica this process manages (default: $FERRY_VOLUME)")
	fs.StringVar(&o.Peers, "peers", "", "peer addresses as node=host:port,...; empty with --cluster-state kubernetes: from the nodes' Leases")
	kubeFlags(fs, o)
	fs.DurationVar(&o.Tick, "tick", time.Second, "how often the replica re-reads the shared state and decides while it has work (idle, with --cluster-state kubernetes, it waits for a change of its ReplicatedVolume)")
	fs.DurationVar(&o.Resync, "resync", replication.DefaultResync, "how often an idle replica re-reads its state and pool although no change was notified")
	fs.BoolVar(&o.Watch, "watch", true, "with --cluster-state kubernetes, wait for changes of the ReplicatedVolume while idle; false: re-read it every tick")
	fs.DurationVar(&o.SnapshotInterval, "snapshot-interval", 30*time.Second, "how often the primary snapshots (StorageClass snapshotInterval)")
	fs.StringVar(&o.FenceNodeCommand, "fence-node-command", "", "with --peer-advertise: a program run with a lost node's name as its only argument before any of that node's volumes is taken over from it (a power switch, a fence agent, a remediation operator's request); exit status 0: the node can no longer write; anything else holds the takeover back, retried; empty: takeovers follow the lease alone")
	fs.Uint64Var(&o.AllowedLag, "allowed-lag", 1, "snapshots a replica may be behind the newest and still be ready")
	fs.IntVar(&o.Keep, "keep", 3, "newest replication snapshots each replica keeps (plus every replica's base)")
	fs.Var(&o.MaxTransferRate, "max-transfer-rate", "limit of each transfer this replica receives, in `bytes` per second: a number, or with a suffix k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. 50M or 64Mi; at least 64Ki; 0: unlimited")
	fs.StringVar(&o.ProbeListen, "probe-listen", "", "address of the readiness probe (GET /ready: 200 while the replica is up to date or the active primary, else 503); empty: none")
	fs.StringVar(&o.StatusListen, "status-listen", "", "address of the replica's HTTP endpoint (GET /status as JSON, POST /snapshot to snapshot now); keep it on localhost; empty: none")
	fs.StringVar(&o.ControlDir, "control-dir", "", "directory of the control socket the node plugin hands publish and unpublish over (a host directory only root enters; the node daemon's --replica-control-dir), where the daemon also publishes the node's write permit; empty: none")
	fs.BoolVar(&o.Watchdog, "watchdog", false, "with --control-dir: fence this volume's primary here on its own when the node's write permit, which the node daemon publishes there, has run out (the daemon is down, or the node lost its lease), or has gone once read; a node whose daemon publishes no permit (an older one) is not watched: stop every process holding its filesystem and cover the pods' mounts. Needs the host's pid namespace, privileges and the kubelet's pods directory mounted with Bidirectional propagation (default false)")
	fs.DurationVar(&o.WatchdogPoll, "watchdog-poll", replication.DefaultWatchdogPoll, "with --watchdog: how often the permit is read (never less often than every half lease margin the daemon publishes)")
	return o
}

func (o *Options) validate(mode string) error {
	if mode == "signer" {
		return o.validateSigner()
	}
	var errs []error
	if o.PeerIdentityDir == "" {
		control := o.ControlDir // a volume manager's
		if mode == "daemon" {
			control = o.ReplicaControl
		}
		o.PeerIdentityDir = "none"
		if control != "" && o.NodeID != "" {
			o.PeerIdentityDir = filepath.Join(control, "peer-identity", o.NodeID)
		}
	}
	if o.PeerIdentityDir != "none" && !filepath.IsAbs(o.PeerIdentityDir) {
		errs = append(errs, errors.New("--peer-identity-dir must be an absolute path or none"))
	}
	if o.PeerRequireNode && o.PeerIdentityDir == "none" && !o.InsecurePeer && (mode == "daemon" || mode == "volume-manager") {
		errs = append(errs, errors.New("--peer-require-node-identity needs this node's own certificate (--peer-identity-dir)"))
	}
	if o.NodeID == "" {
		errs = append(errs, errors.New("--node-id is required (or set NODE_NAME)"))
	}
	if o.Store != "zfs" && o.Store != "memory" {
		errs = append(errs, errors.New("--store must be zfs or memory"))
	}
	for _, l := range []struct{ flag, addr string }{{"--metrics-listen", o.MetricsListen}, {"--replica-metrics-listen", o.ReplicaMetricsListen}} {
		if _, port, err := net.SplitHostPort(l.addr); l.addr != "" && (err != nil || port == "") {
			errs = append(errs, fmt.Errorf("%s=%q: want host:port or :port", l.flag, l.addr))
		}
	}
	if o.HostRoot != "" {
		if err := checkHostRoot(o.HostRoot); err != nil {
			errs = append(errs, fmt.Errorf("--host-root: %w", err))
		}
		// The mount tables leave out what lies below the host root: a
		// pod's target there would be no user of its volume to them.
		for _, d := range []struct{ flag, dir string }{{"--kubelet-dir", o.KubeletDir}, {"--replica-control-dir", o.ReplicaControl}, {"--control-dir", o.ControlDir}} {
			if d.dir != "" && mount.Below(filepath.Clean(d.dir), o.HostRoot) {
				errs = append(errs, fmt.Errorf("%s=%s lies below --host-root=%s, whose mounts Ferry's mount tables leave out", d.flag, d.dir, o.HostRoot))
			}
		}
	}
	if mode == "daemon" && (!filepath.IsAbs(o.KubeletDir) || filepath.Clean(o.KubeletDir) != o.KubeletDir) {
		errs = append(errs, errors.New("--kubelet-dir must be an absolute, clean path"))
	}
	if mode == "daemon" {
		if o.RegistrationDir == "" {
			o.RegistrationDir = filepath.Join(o.KubeletDir, "plugins_registry")
		}
		if o.RegistrationPath == "" {
			o.RegistrationPath = filepath.Join(o.KubeletDir, "plugins", o.DriverName, "csi.sock")
		}
		if o.RegistrationDir != "none" && !filepath.IsAbs(o.RegistrationDir) {
			errs = append(errs, errors.New("--registration-dir must be an absolute path or none"))
		}
		if !filepath.IsAbs(o.RegistrationPath) {
			errs = append(errs, errors.New("--kubelet-registration-path must be an absolute path"))
		}
		if o.ClusterState != "" && o.ClusterState != "kubernetes" {
			errs = append(errs, errors.New("--cluster-state must be kubernetes or empty in daemon mode"))
		}
		if o.PeerAdvertise != "" && (o.ClusterState != "kubernetes" || o.PeerListen == "") {
			errs = append(errs, errors.New("--peer-advertise needs --cluster-state kubernetes and --peer-listen"))
		}
		if o.PeerAdvertise != "" {
			if _, _, err := net.SplitHostPort(o.PeerAdvertise); err != nil {
				errs = append(errs, fmt.Errorf("--peer-advertise must be host:port: %w", err))
			}
		}
		if o.ReplicaTemplate != "" && (o.ClusterState != "kubernetes" || !o.ServeController) {
			errs = append(errs, errors.New("--replica-template needs --cluster-state kubernetes and --serve-controller"))
		}
		if o.PlacementPeriod <= 0 {
			errs = append(errs, errors.New("--placement-period must be positive"))
		}
		if err := o.leaseConfig().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--lease-renew, --lease-duration, --lease-margin: %w", err))
		}
	}
	if mode == "volume-manager" {
		if o.Volume == "" {
			errs = append(errs, errors.New("--volume is required (or set FERRY_VOLUME)"))
		}
		if o.ClusterState != "" && o.ClusterState != "kubernetes" && !strings.HasPrefix(o.ClusterState, "file:") {
			errs = append(errs, errors.New("--cluster-state must be kubernetes or file:<dir>"))
		}
		if o.Tick <= 0 || o.SnapshotInterval < o.Tick {
			errs = append(errs, errors.New("--tick must be positive and --snapshot-interval at least --tick"))
		}
		if o.Resync < o.Tick {
			errs = append(errs, errors.New("--resync must be at least --tick"))
		}
		if o.MaxTransferRate != 0 && o.MaxTransferRate < minTransferRate {
			// A slower receiver would hold one 1 MiB peer message for more
			// than the peer stream's two idle minutes.
			errs = append(errs, fmt.Errorf("--max-transfer-rate must be 0 (unlimited) or at least 64Ki (%d) bytes per second", int64(minTransferRate)))
		}
		if _, err := parsePeers(o.Peers); err != nil {
			errs = append(errs, err)
		}
		if o.Watchdog && o.ControlDir == "" {
			errs = append(errs, errors.New("--watchdog needs --control-dir (where the node daemon publishes the node's write permit)"))
		}
		if o.WatchdogPoll <= 0 {
			errs = append(errs, errors.New("--watchdog-poll must be positive"))
		}
	}
	return errors.Join(errs...)
}

// parsePeers reads node=host:port,... into a map.
func parsePeers(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		node, addr, ok := strings.Cut(kv, "=")
		if !ok || node == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not node=host:port", kv)
		}
		out[node] = addr
	}
	return out, nil
}

func (o FailoverOptions) leaseConfig() liveness.Config {
	return liveness.Config{Renew: o.LeaseRenew, Duration: o.LeaseDuration, Margin: o.LeaseMargin}
}

// metricsListenEnv is --metrics-listen's default: the daemon gives its
// volume managers their address there, not as a flag, which a volume
// manager of an earlier release (a rollback renews the pods in place)
// would refuse.
const metricsListenEnv = "FERRY_METRICS_LISTEN"

// hostRootEnv names the host's root to the image's zfs and zpool
// (cmd/ferry-hosttool), which every zfs command of this process and of
// the volume managers inherits.
const hostRootEnv = "FERRY_HOST_ROOT"

// checkHostRoot refuses a host root that is not an absolute, clean path
// of a directory. It need not be a mount point: the host's tool
// directories are mounted below it.
func checkHostRoot(root string) error {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root || root == "/" {
		return fmt.Errorf("%q: want an absolute, clean path other than / (where the host's tools are mounted, e.g. /host)", root)
	}
	st, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", root)
	}
	return nil
}
